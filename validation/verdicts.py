"""Verdicts that carry their sampling error: two ensembles agree, disagree, or the comparison is
not resolved at their size.

A verdict compares two samples of runs `a` (`n_a` runs) and `b` (`n_b` runs) through a
*discrepancy*: a statistic `statistic(a, b) ≥ 0` that is zero when the two ensembles are equal
and measures how far apart they are in the unit its `tolerance` is stated in
([`mean_gap`][], [`spread_gap`][], [`ks_distance`][]). The question a verdict answers is
whether the two ensembles differ by more than the tolerance (an equivalence test): a theory
that is an approximation differs from the simulation by *something*, and with enough runs any
difference is detected, so "detected" alone cannot be the verdict. [`verdict`][] decides
between

- **disagree**: the exchangeability of the runs (same law on both sides) is rejected at level
  `level` by a permutation test of the statistic (the runs are pooled and split at random
  `resamples` times, `p = (1 + #{permuted statistic ≥ observed}) / (1 + resamples)`), *and*
  the lower `level` bootstrap bound of the discrepancy (each side resampled with replacement,
  `resamples` times) exceeds `tolerance`. The permutation p-value is valid for any statistic
  and any sample size, so two ensembles of the same law are called different with probability
  at most `level`;
- **agree**: the upper `1 − level` bootstrap bound of the discrepancy is at most `tolerance`.
  When the permutation test also rejects the same law, the verdict says so: a difference is
  detected, smaller than the tolerance ([`Verdict.detected`][]);
- **not resolved**: neither. The interval shrinks like `1/√n`. With no difference detected the
  sizes that would resolve it are about `(scale/tolerance)²` times the present ones (`needs`),
  `scale` being the larger of the bound and `1 + z` standard deviations of the bootstrap
  distribution (`z` the one-sided normal quantile of `level`), which guards against the
  optimistic bootstrap of small samples. With a difference detected they are about
  `(half-width / |statistic − tolerance|)²` times the present ones: the interval must shrink
  to the side of the tolerance the discrepancy lies on.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence

import numpy as np

AGREE, DISAGREE, NOT_RESOLVED = "agree", "disagree", "not resolved"
"""The three words of a verdict."""

LEVEL = 0.05
"""Default level: the false-disagree rate on two samples of the same law, and one minus the
confidence of the bootstrap bound."""

RESAMPLES = 999
"""Default number of permutations and of bootstrap resamples."""

CHUNK = 64
"""Resamples evaluated at once."""

Statistic = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""A discrepancy of a batch of sample pairs: `statistic(a (R, n_a, ...), b (R, n_b, ...))` → `(R)`,
the run axis being axis 1."""


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The outcome of [`verdict`][] with its numbers."""

    word: str
    """`"agree"`, `"disagree"` or `"not resolved"`."""
    statistic: float
    """The observed discrepancy (NaN with fewer than two runs on a side)."""
    upper: float
    """Its upper `1 − level` bootstrap bound (NaN with fewer than two runs on a side)."""
    lower: float
    """Its lower `level` bootstrap bound (NaN with fewer than two runs on a side)."""
    p: float
    """The permutation p-value of the same law on both sides."""
    tolerance: float
    level: float
    sizes: tuple[int, int]
    """`(n_a, n_b)`: the runs on each side."""
    needs: tuple[int, int] | None
    """Not resolved: about the sizes `(n_a, n_b)` that would resolve it (None when it cannot be
    estimated: fewer than two runs on a side)."""
    names: tuple[str, str] = ("runs", "runs")
    """What the runs of each side are, for [`phrase`][] (e.g. `("seeds", "paths")`)."""

    @property
    def agree(self) -> bool | None:
        """True (agree), False (disagree) or None (not resolved)."""
        return {AGREE: True, DISAGREE: False}.get(self.word)

    @property
    def detected(self) -> bool:
        """Whether the permutation test rejects the same law on both sides (at `level`): for
        an agreement, a difference smaller than the tolerance is resolved."""
        return bool(self.p < self.level)

    def phrase(self) -> str:
        """The verdict in words, with the sizes that would resolve it."""
        if self.word == AGREE and self.detected:
            return (f"{AGREE} within the tolerance (a smaller difference is detected, "
                    f"p = {self.p:.2g})")
        if self.word != NOT_RESOLVED:
            return self.word
        if self.needs is None:
            return f"{NOT_RESOLVED} at this size (fewer than two runs on a side)"
        a, b = self.names
        if a == b:
            return (f"{NOT_RESOLVED} at this size (needs about {self.needs[0]} and "
                    f"{self.needs[1]} {a})")
        return (f"{NOT_RESOLVED} at this size (needs about {self.needs[0]} {a} and "
                f"{self.needs[1]} {b})")

    def to_dict(self) -> dict:
        """The JSON form (with `agree` and the phrase)."""
        out = dataclasses.asdict(self)
        out["sizes"] = list(self.sizes)
        out["needs"] = None if self.needs is None else list(self.needs)
        out["names"] = list(self.names)
        return {**out, "agree": self.agree, "phrase": self.phrase()}


def verdict(a: np.ndarray | Sequence, b: np.ndarray | Sequence, statistic: Statistic, *,
            tolerance: float, level: float = LEVEL, resamples: int = RESAMPLES,
            seed: int = 0, names: tuple[str, str] = ("runs", "runs")) -> Verdict:
    """Agree, disagree or not resolved for the discrepancy `statistic` ([`Statistic`][])
    between two samples of runs (run axis first; other axes are passed through), as the module
    docstring says. `seed` makes the resampling reproducible; `names` says what the runs of
    each side are ([`Verdict.phrase`][])."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if not tolerance > 0:
        raise ValueError(f"tolerance must be positive, got {tolerance!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    na, nb = a.shape[0], b.shape[0]
    if na < 2 or nb < 2:
        return Verdict(NOT_RESOLVED, math.nan, math.nan, math.nan, math.nan, tolerance, level,
                       (na, nb), None, names)
    observed = float(statistic(a[None], b[None])[0])
    rng = np.random.default_rng(seed)
    pooled = np.concatenate([a, b])
    perm, boot = [], []
    for start in range(0, resamples, CHUNK):
        r = min(CHUNK, resamples - start)
        idx = np.argsort(rng.random((r, na + nb)), axis=1)
        perm.append(statistic(pooled[idx[:, :na]], pooled[idx[:, na:]]))
        boot.append(statistic(a[rng.integers(0, na, (r, na))], b[rng.integers(0, nb, (r, nb))]))
    p = (1 + int(np.sum(np.concatenate(perm) >= observed))) / (1 + resamples)
    boot_all = np.concatenate(boot)
    upper = float(np.quantile(boot_all, 1 - level))
    lower = float(np.quantile(boot_all, level))

    def result(word: str, needs: tuple[int, int] | None = None) -> Verdict:
        return Verdict(word, observed, upper, lower, p, tolerance, level, (na, nb), needs,
                       names)

    if p < level and lower > tolerance:
        return result(DISAGREE)
    if upper <= tolerance:
        return result(AGREE)
    if p < level:
        # a difference is detected and the interval straddles the tolerance: it must shrink
        # to the side the statistic lies on
        k = ((upper - lower) / 2 / max(abs(observed - tolerance), 1e-3 * tolerance)) ** 2
    else:
        # the bound shrinks like 1/√n; below ~30 runs the bootstrap's quantile is too
        # optimistic, so the scale is the larger of the bound and (1 + z) bootstrap standard
        # deviations (the typical size of a null discrepancy plus the one-sided z of the level)
        # (a statistic infinite in some resamples, e.g. two sides without spread at one time
        # and different means there, has no standard deviation: the bound alone sets the scale)
        z = statistics.NormalDist().inv_cdf(1 - level)
        spread = (float(np.std(boot_all, ddof=1)) if np.all(np.isfinite(boot_all))
                  else 0.0)
        scale = max(upper, (1 + z) * spread)
        k = (scale / tolerance) ** 2
    k = max(k, 1.0)
    return result(NOT_RESOLVED, (math.ceil(k * na), math.ceil(k * nb)))


def overall(words: Sequence[str]) -> str:
    """The verdict of several: disagree if any disagrees, agree if all agree, else not
    resolved."""
    if DISAGREE in words:
        return DISAGREE
    return AGREE if all(w == AGREE for w in words) else NOT_RESOLVED


def interval_verdict(ci: Sequence[float], value: float, tolerance: float) -> str:
    """A measured quantity, given by its confidence interval `ci = (lo, hi)`, against a
    predicted `value`: agree when the whole interval lies within `tolerance` of `value`,
    disagree when none of it does, not resolved when it straddles an edge of the tolerance
    (more runs narrow it)."""
    lo, hi = float(ci[0]), float(ci[1])
    if not tolerance > 0 or not lo <= hi:
        raise ValueError(f"interval_verdict: needs tolerance > 0 and lo <= hi, got "
                         f"{tolerance!r}, {ci!r}")
    if value - tolerance <= lo and hi <= value + tolerance:
        return AGREE
    if hi < value - tolerance or lo > value + tolerance:
        return DISAGREE
    return NOT_RESOLVED


# -- discrepancies (batched: run axis 1) --------------------------------------------------

def _flat(x: np.ndarray) -> np.ndarray:
    """`(R, n, ...)` → `(R, n, points)`."""
    return x.reshape(x.shape[0], x.shape[1], -1)


def mean_gap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The largest standardized difference of the means over the other axes (e.g. time):
    `max |mean_a − mean_b| / √((var_a + var_b)/2)`, in standard deviations of a run; points
    where both sides have no spread count only if their means differ (then +∞)."""
    a, b = _flat(a), _flat(b)
    sd = np.sqrt((a.var(axis=1, ddof=1) + b.var(axis=1, ddof=1)) / 2)
    diff = np.abs(a.mean(axis=1) - b.mean(axis=1))
    gap = np.divide(diff, sd, out=np.where(diff > 0, np.inf, 0.0), where=sd > 0)
    return gap.max(axis=1) if gap.shape[1] else np.zeros(gap.shape[0])


def spread_gap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`|mean log(std_b / std_a)|` over the points of the other axes (e.g. the saved times) where
    both sides have a spread: the typical relative difference of the two standard deviations
    (`log 1.25 ≈ 0.22` for a 25% difference). Zero when no point has a spread on both sides."""
    va, vb = _flat(a).var(axis=1, ddof=1), _flat(b).var(axis=1, ddof=1)
    both = (va > 0) & (vb > 0)
    logs = np.where(both, 0.5 * np.log(np.where(both, vb, 1.0) / np.where(both, va, 1.0)), 0.0)
    count = both.sum(axis=1)
    return np.abs(np.divide(logs.sum(axis=1), count, out=np.zeros(len(count)),
                            where=count > 0))


def ks_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The two-sample Kolmogorov–Smirnov distance `sup_x |F_a(x) − F_b(x)|` of 1-D samples
    (`(R, n)`; ±∞ allowed: a run that never escapes is an escape time +∞; NaN counts as +∞)."""
    na, nb = a.shape[1], b.shape[1]
    x = np.concatenate([a, b], axis=1)
    x = np.where(np.isnan(x), np.inf, x)
    order = np.argsort(x, axis=1, kind="stable")
    xs = np.take_along_axis(x, order, axis=1)
    from_a = np.cumsum(order < na, axis=1)        # counts: exact, no round-off
    d = np.abs(from_a * nb - (np.arange(1, na + nb + 1) - from_a) * na) / (na * nb)
    last = np.ones_like(xs, dtype=bool)          # the last point of each group of ties
    last[:, :-1] = xs[:, 1:] != xs[:, :-1]
    return np.where(last, d, 0.0).max(axis=1)
