"""pyproject.toml: the SPDX license string (setuptools deprecated the table form, to be removed
2027-02-18) and a test extra that installs what the tests import."""
import os
import re

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
