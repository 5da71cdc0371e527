"""pyproject.toml: the SPDX license string (setuptools deprecated the table form, to be removed
2027-02-18) and a test extra that installs what the tests import."""
import os
import re
import tempfile

import pytest

tomllib = pytest.importorskip("tomllib")     # Python 3.11+

PYPROJECT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml")


@pytest.fixture(scope="module")
def project():
    if not os.path.exists(PYPROJECT):
        pytest.skip("running from an installed package, not the source tree")
    with open(PYPROJECT, "rb") as f:
        return tomllib.load(f)


def test_license_is_an_spdx_string(project):
    assert project["project"]["license"] == "Apache-2.0"
    # the SPDX string needs setuptools 77 (PEP 639)
    build = " ".join(project["build-system"]["requires"])
    assert int(re.search(r"setuptools>=(\d+)", build).group(1)) >= 77


def test_test_extra_installs_what_tests_need(project):
    names = {re.split(r"[<>=;\[ ]", req, maxsplit=1)[0].lower() for req in project["project"]["optional-dependencies"]["test"]}
    assert {"pytest", "regex", "pexpect", "jsonschema"} <= names


def _extra(project, name) -> set[str]:
    return {re.split(r"[<>=;\[ ]", req, maxsplit=1)[0].lower()
            for req in project["project"]["optional-dependencies"][name]}


def test_ray_is_its_own_extra_that_ci_installs(project):
    """Ray (240 MB) serves one test module: the test extra leaves it out, .ci/run installs it first."""
    assert "ray" not in _extra(project, "test") and "oxillama" in _extra(project, "test")   # oxillama[server]
    assert not any("ray" in req for req in project["project"]["optional-dependencies"]["test"])
    assert "ray" in _extra(project, "ray")
    with open(os.path.join(os.path.dirname(PYPROJECT), ".ci", "run")) as f:
        script = f.read()
    readme_command = 'pip install ".[test]" && pytest'
    assert script.index('pip install ".[ray]"') < script.index(readme_command)
    assert "export CI=true" in script[:script.index(readme_command)]


@pytest.mark.parametrize("ci, extra, runs_slow", [("false", [], False), ("true", [], True)])
def test_slow_tests_run_in_ci_or_when_asked(ci, extra, runs_slow):
    import subprocess
    import sys
    import oxillama
    root = os.path.dirname(PYPROJECT)
    # from a neutral folder, with the package under test on the path: `python -m pytest` puts its working
    # folder first on sys.path, and the repo root's oxillama/ has no build
    env = dict(os.environ, CI=ci, PYTHONPATH=os.path.dirname(os.path.dirname(oxillama.__file__)))
    with tempfile.TemporaryDirectory() as tmp:
        res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                              "--rootdir", root, "-c", PYPROJECT, os.path.join(root, "tests", "test_readme.py"),
                              *extra], cwd=tmp, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode in (0, 5), res.stdout + res.stderr      # 5: all deselected
    collected = [line for line in res.stdout.splitlines() if "::" in line]
    assert any("test_readme_snippet_runs_as_written" in line for line in collected) == runs_slow, res.stdout
    assert ("slow tests were left out" in res.stdout) != runs_slow
