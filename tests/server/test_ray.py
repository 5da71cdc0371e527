"""`oxillama serve --replicas 2` behind Ray Serve (issue 20), with the official openai client on
loopback: requests spread over both replicas (X-Oxillama-Replica names the one that answered), greedy
answers equal the single-process server's, and a replica killed with SIGKILL during a burst costs only
the requests it was running (clean HTTP errors, no hang) while later requests succeed."""
from __future__ import annotations

import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("ray.serve", reason="the ray extra is not installed")
openai = pytest.importorskip("openai")

from .conftest import start_server  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.ray]

PROMPTS = ["What is the capital of France?", "Name a primary colour.", "Say hello in Spanish.",
           "What is 3 + 4?", "Give me a fruit.", "What do bees make?", "Name a planet.", "What is ice made of?"]


@pytest.fixture(scope="module")
def adapter_path(smollm2_path, tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lora"))
    from lora_fixture import write_formula_adapter

    from oxillama.gguf import GGUFFile
    with GGUFFile(smollm2_path) as g:
        return str(write_formula_adapter(g, tmp_path_factory.mktemp("ray") / "style.gguf"))


@pytest.fixture(scope="module")
def ray_server(smollm2_path, adapter_path):
    # --parallel 2: a replica takes at most 4 requests at once, so 8 at once need both replicas
    server = start_server(smollm2_path, "--replicas", "2", "--threads-per-replica", "1", "--parallel", "2",
                          "--n-ctx", "512", "--alias", "smol", "--drain-timeout", "5",
                          "--lora", f"style={adapter_path}")
    deadline = time.monotonic() + 300      # /health answers once one replica runs; the log says when all do
    while "(Ray Serve)" not in server.log() and time.monotonic() < deadline and server.proc.poll() is None:
        time.sleep(0.5)
    assert "(Ray Serve)" in server.log(), server.log()[-3000:]
    yield server
    server.stop()
    assert server.proc.returncode == 0, server.log()[-3000:]


def chat(server, prompt: str, max_tokens: int = 12, model: str = "smol", **kw):
    raw = server.openai(**kw).chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0)
    return raw.headers.get("x-oxillama-replica"), raw.parse()


def test_concurrent_chats_use_both_replicas_and_equal_one_process(ray_server, smollm2_server):
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda p: chat(ray_server, p), PROMPTS))
    replicas = {replica for replica, _ in answers}
    assert len(replicas) == 2, replicas
    for replica in replicas:
        host, pid = replica.rsplit(":", 1)
        assert host and int(pid) != os.getpid()
    for prompt, (_, r) in zip(PROMPTS, answers):
        alone = smollm2_server.openai().chat.completions.create(
            model="smol", messages=[{"role": "user", "content": prompt}], max_tokens=12, temperature=0)
        assert r.choices[0].message.content == alone.choices[0].message.content


def wait_until_routed_to(server, replica: str, headers: dict, streak: int = 16, timeout: float = 120.0):
    """Until Ray's router sends requests with these headers to `replica`: the replica reports its
    adapters to Ray's controller, which tells the router, asynchronously. A GET carrying the header
    is routed as the adapter's requests are but marks nothing (ray_serve.MultiplexedAdapters), so
    probing cannot spread the adapter. Before the router knows, a probe lands on either replica
    (1/2 each); `streak` probes in a row on `replica` happen by chance with odds 2**-streak."""
    deadline = time.monotonic() + timeout
    run, seen = 0, []
    with server.client() as http:
        while run < streak:
            assert time.monotonic() < deadline, f"Ray never routed {headers} to {replica}: {seen[-40:]}"
            where = http.get("/v1/models", headers=headers).headers["x-oxillama-replica"]
            seen.append(where)
            run = run + 1 if where == replica else 0


def test_adapter_requests_stay_on_the_replica_that_has_the_adapter(ray_server, smollm2_server):
    """Ray's model multiplexing: with the header serve_multiplexed_model_id, requests for an adapter
    go to the replica already using it; the text is the adapter's."""
    headers = {"serve_multiplexed_model_id": "style"}
    first, r = chat(ray_server, PROMPTS[0], model="smol:style", default_headers=headers)
    wait_until_routed_to(ray_server, first, headers)
    later = [chat(ray_server, p, model="smol:style", default_headers=headers) for p in PROMPTS[1:5]]
    assert {replica for replica, _ in later} == {first}
    base = chat(ray_server, PROMPTS[0])[1]
    assert r.choices[0].message.content != base.choices[0].message.content


def test_errors_keep_their_shape_and_header(ray_server):
    with ray_server.client() as http:
        r = http.post("/v1/chat/completions", json={"model": "smol", "messages": [], "max_tokens": 4})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert r.headers["x-oxillama-replica"]


def test_a_killed_replica_fails_only_its_own_requests(ray_server):
    """Burst 1 runs while one replica is SIGKILLed: its requests end (an error or a success), none
    hangs. Burst 2, sent right after burst 1 ended, all succeed."""
    victim = int(chat(ray_server, PROMPTS[0], max_tokens=2)[0].rsplit(":", 1)[1])

    def one(prompt):
        try:
            return "ok", chat(ray_server, prompt, max_tokens=48)[0]
        except openai.APIStatusError as e:
            return f"http {e.status_code}", None
        except openai.APIConnectionError as e:       # includes timeouts: a hang would show up here
            return f"connection {type(e).__name__}", None

    with ThreadPoolExecutor(8) as pool:
        burst = [pool.submit(one, p) for p in PROMPTS]
        time.sleep(0.5)
        os.kill(victim, signal.SIGKILL)
        first = [f.result(timeout=90) for f in burst]
    outcomes = [o for o, _ in first]
    assert all(o == "ok" or o.startswith("http ") for o in outcomes), outcomes   # clean errors, no hang
    # sent after the kill: Ray routes around the dead replica (and starts a new one)
    with ThreadPoolExecutor(8) as pool:
        second = list(pool.map(one, PROMPTS))
    print(f"burst during the kill: {outcomes}; after: {[o for o, _ in second]}", file=sys.stderr)
    assert [o for o, _ in second] == ["ok"] * len(PROMPTS)
    assert victim not in {int(r.rsplit(':', 1)[1]) for _, r in second}
