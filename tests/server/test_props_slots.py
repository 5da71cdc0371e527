"""GET /props and GET /slots as llama.cpp's server has them: /props public, /slots behind the API key,
and a slot shows the request it is running."""
from __future__ import annotations

import threading
import time

import pytest

from .sse_reader import sse_lines


@pytest.fixture(scope="module")
def server(server_factory, tiny_models):
    s = server_factory(str(tiny_models / "llama.gguf"), "--parallel", "2", "--n-ctx", "128", api_key="k3y")
    yield s
    s.stop()


def test_props_is_public_and_describes_the_server(server):
    import httpx
    r = httpx.get(server.base_url + "/props", timeout=30)
    assert r.status_code == 200
    props = r.json()
    assert props["model_alias"] == "llama" and props["model_path"].endswith("llama.gguf")
    assert props["total_slots"] == 2
    assert props["default_generation_settings"]["n_ctx"] == 128 == props["n_ctx"]
    assert props["default_generation_settings"]["params"]["temperature"] == 0.8
    assert isinstance(props["chat_template"], str) and isinstance(props["eos_token"], str)
    assert props["modalities"] == {"vision": False, "audio": False}
    assert props["build_info"].startswith("oxillama ")


def test_slots_need_the_key_and_show_a_running_request(server):
    import httpx
    r = httpx.get(server.base_url + "/slots", timeout=30)
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    with server.client() as c:
        idle = c.get("/slots").json()
        assert [s["id"] for s in idle] == [0, 1]
        assert not any(s["is_processing"] for s in idle) and all(s["n_ctx"] == 128 for s in idle)

        body = {"prompt": "a b c", "max_tokens": 100, "ignore_eos": True, "stream": True}
        seen = []

        def watch():
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not seen:
                busy = [s for s in c.get("/slots").json() if s["is_processing"]]
                if busy and busy[0]["n_decoded"] > 0:
                    seen.append(busy[0])
                time.sleep(0.01)
        with c.stream("POST", "/v1/completions", json=body) as r:
            t = threading.Thread(target=watch)
            t.start()
            for _ in sse_lines(r):
                pass
            t.join()
    assert seen, "no slot was seen processing"
    slot = seen[0]
    assert slot["state"] in ("prefill", "decode") and slot["id_task"]
    assert slot["n_prompt_tokens"] >= 3 and slot["n_decoded"] + slot["n_remain"] == 100
