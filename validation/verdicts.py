"""Verdicts that carry their sampling error: two ensembles agree, disagree, or the comparison is
not resolved at their size.

A verdict compares two samples of runs `a` (`n_a` runs) and `b` (`n_b` runs) through a
*discrepancy*: a statistic `statistic(a, b) ≥ 0` that is zero when the two ensembles are equal
and measures how far apart they are in the unit its `tolerance` is stated in
([`mean_gap`][], [`spread_gap`][], [`ks_distance`][]). [`verdict`][] decides between

- **disagree**: the exchangeability of the runs (same law on both sides) is rejected at level
  `level` by a permutation test of the statistic: the runs are pooled and split at random
  `resamples` times, and `p = (1 + #{permuted statistic ≥ observed}) / (1 + resamples)`. This
  p-value is valid for any statistic and any sample size, so two ensembles of the same law are
  called different with probability at most `level`;
- **agree**: not disagree, and the upper `1 − level` bootstrap bound of the discrepancy
  (each side resampled with replacement, `resamples` times) is at most `tolerance`;
- **not resolved**: neither. The bound shrinks like `1/√n`, so the sizes that would resolve it
  are about `(upper/tolerance)²` times the present ones (`needs`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

AGREE, DISAGREE, NOT_RESOLVED = "agree", "disagree", "not resolved"
"""The three words of a verdict."""

LEVEL = 0.05
"""Default level: the false-disagree rate on two samples of the same law, and one minus the
confidence of the bootstrap bound."""

RESAMPLES = 999
"""Default number of permutations and of bootstrap resamples."""

Statistic = Callable[[np.ndarray, np.ndarray], float]


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The outcome of [`verdict`][] with its numbers."""

    word: str
    """`"agree"`, `"disagree"` or `"not resolved"`."""
    statistic: float
    """The observed discrepancy (NaN with fewer than two runs on a side)."""
    upper: float
    """Its upper `1 − level` bootstrap bound (NaN with fewer than two runs on a side)."""
    p: float
    """The permutation p-value of the same law on both sides."""
    tolerance: float
    level: float
    sizes: tuple[int, int]
    """`(n_a, n_b)`: the runs on each side."""
    needs: tuple[int, int] | None
    """Not resolved: about the sizes `(n_a, n_b)` that would resolve it (None when it cannot be
    estimated: fewer than two runs on a side)."""

    @property
    def agree(self) -> bool | None:
        """True (agree), False (disagree) or None (not resolved)."""
        return {AGREE: True, DISAGREE: False}.get(self.word)

    def phrase(self) -> str:
        """The verdict in words, with the sizes that would resolve it."""
        if self.word != NOT_RESOLVED:
            return self.word
        if self.needs is None:
            return f"{NOT_RESOLVED} at this size (fewer than two runs on a side)"
        return (f"{NOT_RESOLVED} at this size (needs about {self.needs[0]} and {self.needs[1]} "
                "runs)")

    def to_dict(self) -> dict:
        """The JSON form (with `agree` and the phrase)."""
        out = dataclasses.asdict(self)
        out["sizes"] = list(self.sizes)
        out["needs"] = None if self.needs is None else list(self.needs)
        return {**out, "agree": self.agree, "phrase": self.phrase()}


def verdict(a: np.ndarray | Sequence, b: np.ndarray | Sequence, statistic: Statistic, *,
            tolerance: float, level: float = LEVEL, resamples: int = RESAMPLES,
            seed: int = 0) -> Verdict:
    """Agree, disagree or not resolved for the discrepancy `statistic(a, b)` between two samples
    of runs (run axis first; other axes are passed through), as the module docstring says.
    `seed` makes the resampling reproducible."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if not tolerance > 0:
        raise ValueError(f"tolerance must be positive, got {tolerance!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    na, nb = a.shape[0], b.shape[0]
    if na < 2 or nb < 2:
        return Verdict(NOT_RESOLVED, math.nan, math.nan, math.nan, tolerance, level, (na, nb),
                       None)
    observed = float(statistic(a, b))
    rng = np.random.default_rng(seed)
    pooled = np.concatenate([a, b])
    hits = 0
    for _ in range(resamples):
        idx = rng.permutation(na + nb)
        hits += statistic(pooled[idx[:na]], pooled[idx[na:]]) >= observed
    p = (1 + hits) / (1 + resamples)
    boot = np.fromiter((statistic(a[rng.integers(0, na, na)], b[rng.integers(0, nb, nb)])
                        for _ in range(resamples)), dtype=np.float64, count=resamples)
    upper = float(np.quantile(boot, 1 - level))
    if p < level:
        return Verdict(DISAGREE, observed, upper, p, tolerance, level, (na, nb), None)
    if upper <= tolerance:
        return Verdict(AGREE, observed, upper, p, tolerance, level, (na, nb), None)
    k = (upper / tolerance) ** 2
    return Verdict(NOT_RESOLVED, observed, upper, p, tolerance, level, (na, nb),
                   (math.ceil(k * na), math.ceil(k * nb)))


def overall(words: Sequence[str]) -> str:
    """The verdict of several: disagree if any disagrees, agree if all agree, else not
    resolved."""
    if DISAGREE in words:
        return DISAGREE
    return AGREE if all(w == AGREE for w in words) else NOT_RESOLVED


# -- discrepancies --------------------------------------------------------------------------

def _moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return x.mean(axis=0), x.var(axis=0, ddof=1)


def mean_gap(a: np.ndarray, b: np.ndarray) -> float:
    """The largest standardized difference of the means over the other axes (e.g. time):
    `max |mean_a − mean_b| / √((var_a + var_b)/2)`, in standard deviations of a run; points
    where both sides have no spread count only if their means differ (then +∞)."""
    (ma, va), (mb, vb) = _moments(a), _moments(b)
    sd, diff = np.sqrt((va + vb) / 2), np.abs(ma - mb)
    gap = np.divide(diff, sd, out=np.where(diff > 0, np.inf, 0.0), where=sd > 0)
    return float(np.max(gap)) if gap.size else 0.0


def spread_gap(a: np.ndarray, b: np.ndarray) -> float:
    """`|mean log(std_b / std_a)|` over the points of the other axes (e.g. the saved times) where
    both sides have a spread: the typical relative difference of the two standard deviations
    (`log 1.25 ≈ 0.22` for a 25% difference). Zero when no point has a spread on both sides."""
    va, vb = a.var(axis=0, ddof=1), b.var(axis=0, ddof=1)
    both = (va > 0) & (vb > 0)
    if not both.any():
        return 0.0
    return float(abs(np.mean(0.5 * np.log(vb[both] / va[both]))))


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov–Smirnov distance `sup_x |F_a(x) − F_b(x)|` of two 1-D samples
    (±∞ allowed: a run that never escapes is an escape time +∞; NaN counts as +∞)."""
    a = np.sort(np.where(np.isnan(a), np.inf, a))
    b = np.sort(np.where(np.isnan(b), np.inf, b))
    x = np.concatenate([a, b])
    fa = np.searchsorted(a, x, side="right") / a.size
    fb = np.searchsorted(b, x, side="right") / b.size
    return float(np.max(np.abs(fa - fb)))
