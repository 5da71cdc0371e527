"""The store behind GET /v1/responses/{id} and previous_response_id: bounded by count and by bytes,
oldest out first, and a record larger than the whole store is answered but not kept."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")

from oxillama.server.response_store import ResponseStore  # noqa: E402


def response(i: int, text: str = "x") -> dict:
    return {"id": f"resp_{i}", "output": [{"type": "message", "content": [{"text": text}]}]}


def test_count_bound_drops_the_oldest():
    store = ResponseStore(max_count=3, max_bytes=1 << 20)
    for i in range(5):
        store.put(response(i), [{"role": "user", "content": str(i)}])
    assert [store.get(f"resp_{i}") is not None for i in range(5)] == [False, False, True, True, True]
    assert store.get("resp_4").conversation == [{"role": "user", "content": "4"}]


def test_byte_bound_drops_the_oldest_and_never_keeps_a_giant():
    store = ResponseStore(max_count=100, max_bytes=2000)
    for i in range(10):
        store.put(response(i, "y" * 300), [])
    assert 0 < store.n_bytes <= 2000 and store.get("resp_9") is not None and store.get("resp_0") is None
    store.put(response(99, "z" * 5000), [])
    assert store.get("resp_99") is None and store.get("resp_9") is not None


def test_delete():
    store = ResponseStore()
    store.put(response(1), [])
    assert store.delete("resp_1") and store.get("resp_1") is None and store.n_bytes == 0
    assert not store.delete("resp_1")
