"""Basic measures of specialization on trajectories (ODE or SGD alike)."""

from __future__ import annotations

import numpy as np

ESCAPE_THRESHOLD = 0.2
"""Head-to-head alignment difference that marks the end of the unspecialized plateau. A random
start at dimension D has differences `≈ √(2/D)` (0.09 at D=250); a specialized pair of heads
differs by O(1). Documented in `docs/ode.md`."""


def alignment(m: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Cosine between head h and feature f, `α_hf = m_hf / √q_hh` (`|k*_f|²/D = 1`); arrays with
    any leading axes, `m (..., H, F)`, `q (..., H, H)`."""
    diag = np.sqrt(np.clip(np.diagonal(q, axis1=-2, axis2=-1), 1e-300, None))
    return m / diag[..., :, None]


def head_spread(m: np.ndarray, q: np.ndarray) -> np.ndarray:
    """`max_f max_{h,h'} |α_hf − α_h'f|`: 0 when all heads are equal (`(...)` from `(..., H, F)`)."""
    a = alignment(m, q)
    return np.max(np.max(a, axis=-2) - np.min(a, axis=-2), axis=-1)


def escape_time(t: np.ndarray, spread: np.ndarray, threshold: float = ESCAPE_THRESHOLD):
    """First time at which `spread` (T) reaches `threshold` (linear interpolation between grid
    points), or None if it never does."""
    t = np.asarray(t)
    spread = np.asarray(spread)
    above = np.nonzero(spread >= threshold)[0]
    if above.size == 0:
        return None
    i = int(above[0])
    if i == 0:
        return float(t[0])
    s0, s1 = spread[i - 1], spread[i]
    return float(t[i - 1] + (threshold - s0) / (s1 - s0) * (t[i] - t[i - 1]))


def canonical_permutation(m_final: np.ndarray) -> np.ndarray:
    """A head order that makes runs comparable despite the heads' permutation symmetry: heads
    sorted by their final alignment with feature 1 (descending), ties broken by the next
    features. `m_final (H, F)` → permutation (H)."""
    keys = tuple(-m_final[:, f] for f in reversed(range(m_final.shape[1])))
    return np.lexsort(keys)


def permute_heads(arrays: dict[str, np.ndarray], perm: np.ndarray) -> dict[str, np.ndarray]:
    """Apply a head permutation to one trajectory's order parameters (arrays `(T, ...)` named as
    in `sgd.npz`/`ode.npz`); other entries are returned unchanged."""
    out = dict(arrays)
    for name in ("m", "n", "b", "kvs", "vks"):
        if name in out:
            out[name] = out[name][:, perm]
    for name in ("q", "s", "kv"):
        if name in out:
            out[name] = out[name][:, perm][:, :, perm]
    return out


def canonicalize_seeds(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Put every seed of an SGD record (arrays `(S, T, ...)`) in its canonical head order."""
    per_head = ("m", "n", "b", "kvs", "vks", "q", "s", "kv")
    S = arrays["m"].shape[0]
    seeds = []
    for i in range(S):
        one = {k: arrays[k][i] for k in per_head if k in arrays}
        seeds.append(permute_heads(one, canonical_permutation(one["m"][-1])))
    out = dict(arrays)
    for k in per_head:
        if k in arrays:
            out[k] = np.stack([s[k] for s in seeds])
    return out


def canonicalize(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Canonical head order of one trajectory (arrays `(T, ...)`)."""
    return permute_heads(arrays, canonical_permutation(arrays["m"][-1]))
