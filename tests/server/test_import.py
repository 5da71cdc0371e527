"""The core stays importable without the server extra."""
import os
from pathlib import Path

import oxillama


def _run_with_this_oxillama(python_runner, code: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(oxillama.__file__).resolve().parents[1]))
    r = python_runner(code, env=env)
    assert r.returncode == 0, r.stderr


def test_core_and_cli_do_not_import_the_server_stack(python_runner):
    code = ("import sys, oxillama, oxillama.runtime, oxillama.cli\n"
            "oxillama.cli.build_parser()\n"
            "heavy = [m for m in ('fastapi', 'uvicorn', 'starlette', 'sse_starlette', 'prometheus_client', 'ray') "
            "if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    _run_with_this_oxillama(python_runner, code)


def test_the_single_process_server_does_not_import_ray(python_runner):
    code = ("import sys, oxillama.server, oxillama.server.app\n"
            "from oxillama.server import ServerConfig\n"
            "oxillama.server.app.create_app(ServerConfig(model='x.gguf'))\n"
            "assert 'ray' not in sys.modules\n")
    _run_with_this_oxillama(python_runner, code)
