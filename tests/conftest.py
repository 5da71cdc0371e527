"""Shared fixtures. Subprocesses run outside the source tree so they import the installed package."""
import os
import subprocess
import sys
import tempfile

import pytest


def run_python(code: str, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Run `python -c code` from a neutral folder (not the repo root, whose oxillama/ has no build)."""
    with tempfile.TemporaryDirectory() as tmp:
        return subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp, capture_output=True, text=True,
                              **kwargs)


@pytest.fixture
def python_runner():
    return run_python
