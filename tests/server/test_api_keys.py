"""--api-key-file: parsing (errors name the line), token buckets (rpm taken on arrival, tpm charged
when a request finishes, debt makes the key wait), and through the real server: 401 for an unknown
key, 429 with Retry-After in OpenAI's and Anthropic's shapes, per-key counters in /metrics under a
hash of the key, never the key."""
from __future__ import annotations

import hashlib
import time

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")

from oxillama.errors import InvalidArgumentError  # noqa: E402
from oxillama.server.api_keys import KeyRing, TokenBucket, key_id, parse_key_file  # noqa: E402

KEY_FILE = """\
# team A: two requests a minute
sk-team-a rpm=2
sk-team-b   tpm=40   # 40 tokens a minute
sk-free
"""


def test_parse_key_file(tmp_path):
    path = tmp_path / "keys"
    path.write_text(KEY_FILE)
    assert parse_key_file(str(path)) == {"sk-team-a": (2, None), "sk-team-b": (None, 40), "sk-free": (None, None)}


@pytest.mark.parametrize("text, where", [("sk-a rpm=0\n", ":1:"), ("sk-a\nsk-b rps=3\n", ":2:"),
                                         ("sk-a rpm=1 rpm=2\n", "twice"), ("sk-a\nsk-a\n", "twice"),
                                         ("# only a comment\n", "no key"), ("rpm=3\n", ":1:")])
def test_bad_key_files_name_the_line(tmp_path, text, where):
    path = tmp_path / "keys"
    path.write_text(text)
    with pytest.raises(InvalidArgumentError, match=where):
        parse_key_file(str(path))
    with pytest.raises(InvalidArgumentError, match="no-such-file"):
        parse_key_file(str(tmp_path / "no-such-file"))


def test_bucket_refills_continuously_and_may_go_into_debt():
    b = TokenBucket(60)                     # one a second
    now = b.stamp
    assert b.wait(60, now) == 0 and b.wait(61, now) == pytest.approx(1.0)
    b.take(90, now)                         # a request larger than the bucket: 30 in debt
    assert b.wait(0, now) == pytest.approx(30.0) and b.wait(0, now + 30.0) == 0


class FakeHandle:
    def __init__(self, key, prompt, generated):
        self.stats = {"api_key": key, "n_prompt_tokens": prompt, "n_generated_tokens": generated}


def test_keyring_rpm_and_tpm():
    ring = KeyRing({"a": (2, None), "b": (None, 40)})
    a, b = ring.find("a"), ring.find("b")
    assert ring.find("c") is None
    assert ring.admit(a) is None and ring.admit(a) is None
    limit, wait = ring.admit(a)
    assert limit == "rpm" and 0 < wait <= 30.0
    assert ring.admit(b) is None
    ring.observe(FakeHandle(b, 30, 25))     # 55 tokens of 40: in debt
    limit, wait = ring.admit(b)
    assert limit == "tpm" and 0 < wait <= 60.0 * 15 / 40 + 1e-6


@pytest.fixture(scope="module")
def server(server_factory, tiny_models, tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys"
    path.write_text(KEY_FILE)
    s = server_factory(str(tiny_models / "llama.gguf"), "--parallel", "2", "--n-ctx", "128",
                       "--api-key-file", str(path))
    yield s
    s.stop()


def complete(server, key: str, path: str = "/v1/completions", **headers):
    import httpx
    body = {"model": "m", "prompt": "hello", "max_tokens": 4, "temperature": 0.0} if path == "/v1/completions" else \
        {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(server.base_url + path, json=body, timeout=120.0,
                      headers=headers or {"Authorization": f"Bearer {key}"})


def test_unknown_key_is_401(server):
    r = complete(server, "sk-nobody")
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = complete(server, "", "/v1/messages", **{"x-api-key": "sk-nobody"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error" and r.json()["type"] == "error"


def test_rpm_limit_is_429_with_retry_after_in_each_shape(server):
    assert complete(server, "sk-team-a").status_code == 200
    r = complete(server, "", "/v1/messages", **{"x-api-key": "sk-team-a"})   # x-api-key counts the same
    assert r.status_code != 429
    r = complete(server, "sk-team-a")
    assert r.status_code == 429 and 1 <= int(r.headers["Retry-After"]) <= 30
    assert r.json()["error"]["type"] == "rate_limit_error" and "rpm" in r.json()["error"]["message"]
    r = complete(server, "", "/v1/messages", **{"x-api-key": "sk-team-a"})
    assert r.status_code == 429 and "Retry-After" in r.headers
    assert r.json() == {"type": "error", "error": {"type": "rate_limit_error", "message": r.json()["error"]["message"]}}
    for _ in range(3):
        assert complete(server, "sk-free").status_code == 200     # other keys are not affected


def test_tpm_is_charged_when_requests_finish(server):
    n = 0
    while True:     # ~9 tokens a request against 40 a minute: a few pass, then the debt refuses
        r = complete(server, "sk-team-b")
        if r.status_code == 429:
            break
        assert r.status_code == 200
        n += 1
        assert n < 10
    assert n >= 2 and "tpm" in r.json()["error"]["message"]


def test_metrics_count_per_key_hash_never_the_key(server):
    import httpx
    text = httpx.get(server.base_url + "/metrics").text
    assert "sk-team-a" not in text and "sk-free" not in text
    assert f'oxillama:api_key_requests_total{{key="{key_id("sk-free")}"}}' in text
    assert f'oxillama:api_key_rate_limited_total{{key="{key_id("sk-team-a")}",limit="rpm"}}' in text
    deadline = time.monotonic() + 10
    while f'oxillama:api_key_tokens_total{{key="{key_id("sk-free")}",kind="generation"}}' not in text:
        assert time.monotonic() < deadline
        time.sleep(0.2)
        text = httpx.get(server.base_url + "/metrics").text
    assert key_id("sk-free") == hashlib.sha256(b"sk-free").hexdigest()[:12]
