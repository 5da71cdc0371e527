"""Perplexity and KL divergence of a model over a text, as llama-perplexity computes them.

The text is tokenized once (with BOS where the vocabulary adds it) and cut into chunks of n_ctx
tokens; each chunk starts from an empty context with its first token replaced by BOS, and only the
second half of it is scored (every scored token has at least n_ctx/2 tokens before it):
PPL = exp(mean over scored tokens of -log p(token | tokens before)). The ± is the standard error
of that mean carried through exp, as llama-perplexity prints it.

Chunks run n_seq at a time through the many-sequence forward (runtime.batch.SequencePool): one step
prefills the first halves of every chunk, a second step gives the logits of the second halves (by
the invariant, the same logits as one call over the whole chunk).

KL divergence: save_logits writes llama-perplexity's `--kl-divergence-base` file (the tokens and,
per scored position, the log-probabilities quantized to 16 bits); kl_divergence reads such a file
(ours or llama.cpp's) and compares another model (typically a quantized copy) to it.
"""
from __future__ import annotations

import logging
import math
import struct
import time
from dataclasses import dataclass, field

import numpy as np

from oxillama.errors import InvalidArgumentError, OxillamaError
from oxillama.runtime.batch import SequencePool

log = logging.getLogger("oxillama")

_MAGIC = b"_logits_"


@dataclass
class PerplexityResult:
    ppl: float
    ppl_unc: float
    n_ctx: int
    n_chunks: int
    n_tokens: int              # tokens of the whole text
    count: int                 # scored tokens
    chunk_ppl: list[float] = field(default_factory=list)   # running PPL after each chunk ([1], [2], ...)
    seconds: float = 0.0


def _tokens_for(engine, text: str) -> list[int]:
    return engine.tokenize(text, add_special=True, parse_special=False)


def _chunk_logits(engine, chunks: list[np.ndarray], first: int, n_seq: int):
    """Yield (chunk index, logits of positions first..n_ctx-1) for every chunk, n_seq chunks per step pair."""
    n_ctx = len(chunks[0])
    pool = SequencePool(engine, n_seq_max=n_seq, n_ctx=n_ctx, n_batch=max(engine.n_batch, n_seq))
    bos = engine.tokenizer.bos_id
    add_bos = engine.tokenizer.add_bos and bos is not None
    for i in range(0, len(chunks), n_seq):
        group = chunks[i:i + n_seq]
        ids = [pool.add() for _ in group]
        try:
            heads = []
            for c in group:
                head = c[:first].copy()
                if add_bos:
                    head[0] = bos
                heads.append(head)
            if first:
                pool.step([(s, h, False) for s, h in zip(ids, heads)])
            outs = pool.step([(s, c[first:], True) for s, c in zip(ids, group)])
            for k, out in enumerate(outs):
                yield i + k, out
        finally:
            for s in ids:
                pool.remove(s)


def _prepare(engine, tokens, n_ctx: int, n_chunks: int | None):
    if n_ctx < 2:
        raise InvalidArgumentError(f"the context must hold at least 2 tokens, got -c {n_ctx}")
    if n_ctx > engine.n_ctx:
        raise InvalidArgumentError(f"-c {n_ctx} is larger than the model's context ({engine.n_ctx})")
    if len(tokens) < 2 * n_ctx:
        raise InvalidArgumentError(f"you need at least {2 * n_ctx} tokens to evaluate perplexity with a context "
                                   f"of {n_ctx}; the text tokenizes to only {len(tokens)} tokens")
    n_max = len(tokens) // n_ctx
    n = n_max if n_chunks is None or n_chunks < 0 else min(n_chunks, n_max)
    arr = np.asarray(tokens[:n * n_ctx], dtype=np.int32)
    return [arr[i * n_ctx:(i + 1) * n_ctx] for i in range(n)]


def _nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log softmax(logits)[target] per row, as llama.cpp: max in float, sum of expf in double."""
    mx = logits.max(axis=1)
    sum_exp = np.exp(logits - mx[:, None]).sum(axis=1, dtype=np.float64)
    return -(logits[np.arange(len(targets)), targets].astype(np.float64) - mx - np.log(sum_exp))


def perplexity(engine, text: str | None = None, *, tokens: list[int] | None = None, n_ctx: int = 512,
               n_chunks: int | None = None, n_seq: int | None = None, progress=None,
               save_logits: str | None = None) -> PerplexityResult:
    """llama-perplexity's figure for engine's model over text (or tokens). n_seq: chunks per forward
    (default: as many as 2048 tokens hold, llama-perplexity's batch); progress(chunk_index, running_ppl)
    after each chunk; save_logits: also write the KL-divergence base file there."""
    t0 = time.perf_counter()
    if tokens is None:
        tokens = _tokens_for(engine, text or "")
    chunks = _prepare(engine, tokens, n_ctx, n_chunks)
    first = n_ctx // 2
    n_seq = max(1, 2048 // n_ctx) if n_seq is None else int(n_seq)
    n_vocab = engine.n_vocab
    nll = nll2 = 0.0
    count = 0
    running = []
    out = None
    if save_logits is not None:
        out = open(save_logits, "wb")
        out.write(_MAGIC + struct.pack("<iii", n_ctx, n_vocab, len(chunks)))
        out.write(np.concatenate(chunks).astype("<i4").tobytes())
    try:
        for i, logits in _chunk_logits(engine, chunks, first, n_seq):
            rows = logits[:n_ctx - 1 - first]
            v = _nll(rows, chunks[i][first + 1:])
            nll += float(v.sum())
            nll2 += float((v * v).sum())
            count += len(v)
            if out is not None:
                out.write(_quantized_log_probs(rows).tobytes())
            running.append(math.exp(nll / count))
            if progress is not None:
                progress(i, running[-1])
    finally:
        if out is not None:
            out.close()
    mean, mean2 = nll / count, nll2 / count
    ppl = math.exp(mean)
    var = mean2 - mean * mean
    unc = math.sqrt(var / (count - 1)) * ppl if var > 0 and count > 1 else 0.0
    return PerplexityResult(ppl, unc, n_ctx, len(chunks), len(tokens), count, running, time.perf_counter() - t0)


def _nearest_int(x: np.ndarray) -> np.ndarray:
    return np.rint(x).astype(np.int64)   # ties to even, as the 1.5*2^23 trick


def _quantized_log_probs(logits: np.ndarray) -> np.ndarray:
    """llama.cpp's 16-bit log-probabilities of each row: 2 float32 (scale, min log-prob) then
    round((logit - min) / scale) per token, rows padded to an even count."""
    n, v = logits.shape
    nv = 2 * ((v + 1) // 2) + 4
    mx = logits.max(axis=1)
    mn = np.maximum(logits.min(axis=1), mx - np.float32(16))
    sum_exp = np.exp(logits - mx[:, None]).sum(axis=1, dtype=np.float64)
    log_sum_exp = np.log(sum_exp).astype(np.float32)
    min_log_prob = (mn - mx - log_sum_exp).astype(np.float32)
    scale = ((mx - mn) / np.float32(65535)).astype(np.float32)
    out = np.zeros((n, nv), dtype=np.uint16)
    head = np.stack([scale, min_log_prob], axis=1).astype("<f4")
    out[:, :4] = head.view(np.uint16).reshape(n, 4)
    ok = scale > 0
    inv = np.where(ok, 1 / np.where(ok, scale, 1), 0).astype(np.float32)
    q = _nearest_int(inv[:, None] * (logits - mn[:, None]))
    q = np.where(logits > mn[:, None], q, 0)
    out[:, 4:4 + v] = np.where(ok[:, None], q, 0).astype(np.uint16)
    return out


@dataclass
class KLDivergenceResult:
    count: int
    ppl: tuple[float, float]
    ppl_base: tuple[float, float]
    ppl_ratio: tuple[float, float]
    log_ppl_ratio: tuple[float, float]
    cor: float
    ppl_diff: tuple[float, float]
    kld: tuple[float, float]
    kld_percentiles: dict[str, float]
    same_top: tuple[float, float]
    p_diff: tuple[float, float]
    p_diff_rms: tuple[float, float]
    p_diff_percentiles: dict[str, float]
    seconds: float = 0.0


def read_logits_header(path: str):
    with open(path, "rb") as f:
        head = f.read(20)
        if len(head) < 20 or head[:8] != _MAGIC:
            raise OxillamaError(f"{path} does not look like a file of log-probabilities "
                                f"(llama-perplexity --kl-divergence-base)")
        n_ctx, n_vocab, n_chunk = struct.unpack("<iii", head[8:])
        tokens = np.frombuffer(f.read(4 * n_ctx * n_chunk), dtype="<i4")
        if tokens.size != n_ctx * n_chunk or n_ctx < 2 or n_chunk < 1:
            raise OxillamaError(f"{path}: truncated log-probabilities file")
    return n_ctx, n_vocab, n_chunk, tokens.astype(np.int32), 20 + 4 * n_ctx * n_chunk


def _mean_unc(s: float, s2: float, n: int) -> tuple[float, float]:
    if n < 1:
        return 0.0, 0.0
    f = s / n
    df = s2 / n - f * f
    return f, (math.sqrt(df / (n - 1)) if df > 0 and n > 10 else 0.0)


def _percentile(values: np.ndarray, fraction: float) -> float:
    if fraction <= 0:
        return float(values[0])
    if fraction >= 1:
        return float(values[-1])
    p = fraction * (len(values) - 1)
    ip = int(p)
    p -= ip
    return float((1 - p) * values[ip] + p * values[min(ip + 1, len(values) - 1)])


def kl_divergence(engine, base_path: str, *, n_seq: int | None = None, progress=None) -> KLDivergenceResult:
    """Compare engine's model to the log-probabilities saved in base_path, as llama-perplexity
    --kl-divergence does (same tokens, chunks and scored positions)."""
    t0 = time.perf_counter()
    n_ctx, n_vocab, n_chunk, tokens, offset = read_logits_header(base_path)
    if n_vocab != engine.n_vocab:
        raise OxillamaError(f"{base_path} was made with a vocabulary of {n_vocab} tokens, this model has "
                            f"{engine.n_vocab}")
    if n_ctx > engine.n_ctx:
        raise InvalidArgumentError(f"{base_path} was computed with a context of {n_ctx}, larger than the "
                                   f"model's {engine.n_ctx}")
    first = n_ctx // 2
    m = n_ctx - 1 - first
    nv = 2 * ((n_vocab + 1) // 2) + 4
    chunks = [tokens[i * n_ctx:(i + 1) * n_ctx] for i in range(n_chunk)]
    n_seq = max(1, 2048 // n_ctx) if n_seq is None else int(n_seq)
    base = np.memmap(base_path, dtype="<u2", mode="r", offset=offset)
    if base.size < n_chunk * m * nv:
        raise OxillamaError(f"{base_path}: truncated log-probabilities file")
    base = base[:n_chunk * m * nv].reshape(n_chunk, m, nv)
    acc = dict(nll=0.0, nll2=0.0, nll_base=0.0, nll_base2=0.0, nll_nll_base=0.0, kld=0.0, kld2=0.0,
               p_diff=0.0, p_diff2=0.0, p_diff4=0.0, same_top=0)
    klds, p_diffs = [], []
    for i, logits in _chunk_logits(engine, chunks, first, n_seq):
        rows = logits[:m]
        targets = chunks[i][first + 1:]
        b = np.asarray(base[i])
        head = np.ascontiguousarray(b[:, :4]).view("<f4").reshape(m, 2)
        scale, min_log_prob = head[:, 0], head[:, 1]
        log_p_base = scale[:, None] * b[:, 4:4 + n_vocab].astype(np.float32) + min_log_prob[:, None]
        mx = rows.max(axis=1)
        imax = rows.argmax(axis=1)
        sum_exp = np.exp(rows - mx[:, None]).sum(axis=1, dtype=np.float64)
        lse = np.log(sum_exp).astype(np.float32)
        nll = (mx + lse - rows[np.arange(m), targets]).astype(np.float64)
        nll_base = -log_p_base[np.arange(m), targets].astype(np.float64)
        keep = log_p_base > np.float32(-16)
        terms = np.where(keep, np.exp(log_p_base) * (log_p_base - rows + (mx + lse)[:, None]), 0)
        kld = terms.sum(axis=1, dtype=np.float64)
        imax_base = log_p_base.argmax(axis=1)
        p_diff = (np.exp(-nll) - np.exp(-nll_base)).astype(np.float64)
        acc["nll"] += nll.sum(); acc["nll2"] += (nll * nll).sum()
        acc["nll_base"] += nll_base.sum(); acc["nll_base2"] += (nll_base * nll_base).sum()
        acc["nll_nll_base"] += (nll * nll_base).sum()
        acc["kld"] += kld.sum(); acc["kld2"] += (kld * kld).sum()
        acc["p_diff"] += p_diff.sum(); acc["p_diff2"] += (p_diff ** 2).sum(); acc["p_diff4"] += (p_diff ** 4).sum()
        acc["same_top"] += int((imax == imax_base).sum())
        klds.append(kld.astype(np.float32))
        p_diffs.append(p_diff.astype(np.float32))
        if progress is not None:
            n = m * len(klds)
            progress(i, math.exp(acc["nll"] / n), acc["kld"] / n, acc["same_top"] / n)
    n = m * n_chunk
    log_ppl = _mean_unc(acc["nll"], acc["nll2"], n)
    log_ppl_base = _mean_unc(acc["nll_base"], acc["nll_base2"], n)
    cov = ((acc["nll_nll_base"] / n - (acc["nll"] / n) * (acc["nll_base"] / n)) / (n - 1)) if n >= 10 else 0.0
    ppl = (math.exp(log_ppl[0]), math.exp(log_ppl[0]) * log_ppl[1])
    ppl_base = (math.exp(log_ppl_base[0]), math.exp(log_ppl_base[0]) * log_ppl_base[1])
    ratio_val = log_ppl[0] - log_ppl_base[0]
    ratio_unc = math.sqrt(max(0.0, log_ppl[1] ** 2 + log_ppl_base[1] ** 2 - 2 * cov))
    cor = cov / (log_ppl[1] * log_ppl_base[1]) if log_ppl[1] and log_ppl_base[1] else 0.0
    ppl_cov = ppl[0] * ppl_base[0] * cov
    diff_unc = math.sqrt(max(0.0, ppl[1] ** 2 + ppl_base[1] ** 2 - 2 * ppl_cov))
    kv = np.sort(np.concatenate(klds))
    pv = np.sort(np.concatenate(p_diffs))

    def median(v):
        return float(0.5 * (v[len(v) // 2] + v[len(v) // 2 - 1]) if len(v) % 2 == 0 else v[len(v) // 2])
    kpct = {"max": float(kv[-1]), "99.9": _percentile(kv, 0.999), "99.0": _percentile(kv, 0.99),
            "95.0": _percentile(kv, 0.95), "90.0": _percentile(kv, 0.90), "median": median(kv),
            "10.0": _percentile(kv, 0.10), "5.0": _percentile(kv, 0.05), "1.0": _percentile(kv, 0.01),
            "0.1": _percentile(kv, 0.001), "min": float(kv[0])}
    ppct = {"max": float(pv[-1]), "99.9": _percentile(pv, 0.999), "99.0": _percentile(pv, 0.99),
            "95.0": _percentile(pv, 0.95), "90.0": _percentile(pv, 0.90), "75.0": _percentile(pv, 0.75),
            "median": median(pv), "25.0": _percentile(pv, 0.25), "10.0": _percentile(pv, 0.10),
            "5.0": _percentile(pv, 0.05), "1.0": _percentile(pv, 0.01), "0.1": _percentile(pv, 0.001),
            "min": float(pv[0])}
    mse = _mean_unc(acc["p_diff2"], acc["p_diff4"], n)
    rms = math.sqrt(mse[0])
    same = acc["same_top"] / n
    return KLDivergenceResult(
        count=n, ppl=ppl, ppl_base=ppl_base, ppl_ratio=(math.exp(ratio_val), math.exp(ratio_val) * ratio_unc),
        log_ppl_ratio=(ratio_val, ratio_unc), cor=cor, ppl_diff=(ppl[0] - ppl_base[0], diff_unc),
        kld=_mean_unc(acc["kld"], acc["kld2"], n), kld_percentiles=kpct,
        same_top=(same, math.sqrt(same * (1 - same) / (n - 1)) if n > 1 else 0.0),
        p_diff=_mean_unc(acc["p_diff"], acc["p_diff2"], n), p_diff_rms=(rms, 0.5 / rms * mse[1] if rms else 0.0),
        p_diff_percentiles=ppct, seconds=time.perf_counter() - t0)
