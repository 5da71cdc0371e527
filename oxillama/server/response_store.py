"""Stored responses of /v1/responses (`store: true`, the default): what GET /v1/responses/{id} returns
and what a later request's `previous_response_id` continues. Kept in memory, bounded by count and by
bytes (the JSON size of each record); the oldest go first, and a restart forgets them all (OpenAI keeps
them 30 days; a local server keeps what fits)."""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from oxillama.server.protocol.responses import json_size


@dataclass
class StoredResponse:
    response: dict            # the response object as returned
    conversation: list[dict]  # chat messages: the whole conversation up to and including its output
    size: int


class ResponseStore:
    def __init__(self, max_count: int = 1024, max_bytes: int = 64 << 20):
        self.max_count, self.max_bytes = max_count, max_bytes
        self._items: OrderedDict[str, StoredResponse] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, response: dict, conversation: list[dict]) -> None:
        size = json_size(response) + json_size(conversation)
        if size > self.max_bytes or self.max_count == 0:
            return              # larger than the whole store: answered, not kept
        with self._lock:
            old = self._items.pop(response["id"], None)
            if old is not None:
                self._bytes -= old.size
            self._items[response["id"]] = StoredResponse(response, conversation, size)
            self._bytes += size
            while len(self._items) > self.max_count or self._bytes > self.max_bytes:
                _, gone = self._items.popitem(last=False)
                self._bytes -= gone.size

    def get(self, response_id: str) -> StoredResponse | None:
        with self._lock:
            return self._items.get(response_id)

    def delete(self, response_id: str) -> bool:
        with self._lock:
            gone = self._items.pop(response_id, None)
            if gone is not None:
                self._bytes -= gone.size
            return gone is not None

    def __len__(self) -> int:
        return len(self._items)

    @property
    def n_bytes(self) -> int:
        return self._bytes
