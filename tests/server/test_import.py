"""The core stays importable without the server extra."""
import os
from pathlib import Path

import oxillama


def test_core_and_cli_do_not_import_the_server_stack(python_runner):
    code = ("import sys, oxillama, oxillama.runtime, oxillama.cli\n"
            "oxillama.cli.build_parser()\n"
            "heavy = [m for m in ('fastapi', 'uvicorn', 'starlette', 'sse_starlette', 'prometheus_client') "
            "if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    env = dict(os.environ, PYTHONPATH=str(Path(oxillama.__file__).resolve().parents[1]))
    r = python_runner(code, env=env)
    assert r.returncode == 0, r.stderr
