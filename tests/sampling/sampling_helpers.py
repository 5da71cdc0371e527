"""Helpers for the sampling tests: a float64 softmax reference and hand-made distributions."""
import numpy as np


def softmax(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x[np.isfinite(x)].max())
    return e / e.sum()


def logits_from_probs(p) -> np.ndarray:
    """float32 logits whose softmax is p (zeros become -inf)."""
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.log(p).astype(np.float32)


def kept(row) -> set:
    """Token ids a stage left in play (not -inf)."""
    return set(np.flatnonzero(np.asarray(row) > -np.inf).tolist())


# chi-square critical values at significance 1e-3 (from the chi-square table), by degrees of freedom
CHI2_CRIT_1E3 = {4: 18.467, 9: 27.877, 19: 43.820}


def chi_square(counts, probs) -> float:
    counts = np.asarray(counts, dtype=np.float64)
    expected = np.asarray(probs, dtype=np.float64) * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())
