"""API keys with per-key limits: `oxillama serve --api-key-file FILE`.

The file holds one key per line, optionally followed by its limits: `rpm=N` (requests per minute)
and/or `tpm=N` (prompt + generated tokens per minute); blank lines and `#` comments are ignored:

    # team A: 60 requests and 100k tokens a minute
    sk-team-a rpm=60 tpm=100000
    sk-ci                               # no limits

Each limit is a token bucket that holds a minute's worth and refills continuously. A request takes
one from the rpm bucket when it arrives; its tokens are charged to the tpm bucket when it finishes
(the count is known only then), so a bucket may go into debt, and the key's next requests wait until
it is paid back. Over a limit: 429 with `Retry-After` (seconds) in the API's own error shape; an
unknown key: 401. /metrics counts requests, tokens and refusals per key under the first 12 hex digits
of the key's SHA-256, never the key itself.
"""
from __future__ import annotations

import contextvars
import hashlib
import math
import threading
import time
from dataclasses import dataclass, field

from oxillama.errors import InvalidArgumentError

# the key of the request being handled, set by the auth dependency and read where the request is
# submitted to the scheduler (routes._generation.submit_all), which tags its handles with it
current_key: contextvars.ContextVar["KeyState | None"] = contextvars.ContextVar("oxillama_api_key", default=None)


def key_id(key: str) -> str:
    """How a key appears in metrics and logs: the first 12 hex digits of its SHA-256."""
    return hashlib.sha256(key.encode()).hexdigest()[:12]


@dataclass
class TokenBucket:
    """`per_minute` units a minute; holds at most a minute's worth; may go into debt (take_debt)."""
    per_minute: int
    level: float = field(init=False)
    stamp: float = field(init=False)

    def __post_init__(self):
        self.level = float(self.per_minute)
        self.stamp = time.monotonic()

    def _refill(self, now: float) -> None:
        self.level = min(float(self.per_minute), self.level + (now - self.stamp) * self.per_minute / 60.0)
        self.stamp = now

    def wait(self, need: float, now: float) -> float:
        """Seconds until the bucket holds `need` (0: it does now)."""
        self._refill(now)
        return 0.0 if self.level >= need else (need - self.level) * 60.0 / self.per_minute

    def take(self, n: float, now: float) -> None:
        self._refill(now)
        self.level -= n


@dataclass
class KeyState:
    key: str
    rpm: TokenBucket | None = None
    tpm: TokenBucket | None = None

    @property
    def id(self) -> str:
        return key_id(self.key)


def parse_key_file(path: str) -> dict[str, tuple[int | None, int | None]]:
    """{key: (rpm, tpm)} from an --api-key-file; a bad line raises naming the file and line."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise InvalidArgumentError(f"--api-key-file {path}: {e.strerror or e}") from None
    keys: dict[str, tuple[int | None, int | None]] = {}
    for lineno, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        key, limits = words[0], {"rpm": None, "tpm": None}
        if "=" in key:
            raise InvalidArgumentError(f"{path}:{lineno}: a line starts with the key, then rpm=N / tpm=N")
        for word in words[1:]:
            name, sep, value = word.partition("=")
            if not sep or name not in limits or not value.isdigit() or int(value) < 1:
                raise InvalidArgumentError(f"{path}:{lineno}: {word!r} is not rpm=N or tpm=N (N >= 1)")
            if limits[name] is not None:
                raise InvalidArgumentError(f"{path}:{lineno}: {name} is given twice")
            limits[name] = int(value)
        if key in keys:
            raise InvalidArgumentError(f"{path}:{lineno}: the key {key_id(key)}... (sha256) is listed twice")
        keys[key] = (limits["rpm"], limits["tpm"])
    if not keys:
        raise InvalidArgumentError(f"--api-key-file {path} holds no key")
    return keys


class KeyRing:
    """The keys a server accepts and their buckets; thread-safe (the scheduler's thread charges tokens)."""

    def __init__(self, keys: dict[str, tuple[int | None, int | None]], registry=None):
        self._keys = {k: KeyState(k, TokenBucket(rpm) if rpm else None, TokenBucket(tpm) if tpm else None)
                      for k, (rpm, tpm) in keys.items()}
        self._by_digest = {hashlib.sha256(k.encode()).digest(): s for k, s in self._keys.items()}
        self._lock = threading.Lock()
        self.requests = self.tokens = self.refused = None
        if registry is not None:
            from prometheus_client import Counter
            from oxillama.server.metrics import PREFIX
            self.requests = Counter(PREFIX + "api_key_requests", "Requests admitted, by key (sha256 prefix).",
                                    ["key"], registry=registry)
            self.tokens = Counter(PREFIX + "api_key_tokens", "Prompt and generated tokens, by key (sha256 prefix).",
                                  ["key", "kind"], registry=registry)
            self.refused = Counter(PREFIX + "api_key_rate_limited", "Requests refused with 429, by key and limit.",
                                   ["key", "limit"], registry=registry)

    def find(self, token: str) -> KeyState | None:
        """The key's state, or None; compared by digest, so the time taken says nothing of the keys."""
        return self._by_digest.get(hashlib.sha256(token.encode()).digest())

    def admit(self, state: KeyState) -> tuple[str, float] | None:
        """Take one request from the key's buckets, or (which limit, seconds to wait) when over one."""
        now = time.monotonic()
        with self._lock:
            waits = []
            if state.rpm is not None:
                waits.append(("rpm", state.rpm.wait(1.0, now)))
            if state.tpm is not None:
                waits.append(("tpm", state.tpm.wait(0.0, now)))      # not in debt
            over = max(waits, key=lambda w: w[1], default=None)
            if over is not None and over[1] > 0:
                if self.refused is not None:
                    self.refused.labels(state.id, over[0]).inc()
                return over
            if state.rpm is not None:
                state.rpm.take(1.0, now)
        if self.requests is not None:
            self.requests.labels(state.id).inc()
        return None

    def observe(self, handle) -> None:
        """Scheduler listener: charge a finished request's tokens to the key it came with."""
        state = handle.stats.get("api_key")
        if not isinstance(state, KeyState):
            return
        prompt = int(handle.stats.get("n_prompt_tokens") or 0)
        generated = int(handle.stats.get("n_generated_tokens") or 0)
        if state.tpm is not None:
            with self._lock:
                state.tpm.take(prompt + generated, time.monotonic())
        if self.tokens is not None:
            self.tokens.labels(state.id, "prompt").inc(prompt)
            self.tokens.labels(state.id, "generation").inc(generated)


def retry_after(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))
