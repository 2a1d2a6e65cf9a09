"""Verdicts on long-time results, checked for node convergence (`docs/activations.md`,
`docs/phases.md`): a claim is "reproduced" or "not reproduced" only when its margin exceeds
what the ODE's nodes can move it by.

The numbers behind a long-time verdict (a final risk, a pruning curve, the times at which the
features are told apart) come from an ODE on a fixed set of Gaussian nodes. Each run's final
segment is rerun on 4× the nodes ([`headflow.dynamics.ode.node_change`][]); the *margin* of a claim
is how far the measured quantity is from the claim's boundary (e.g. `0.02·R_Bayes − (R − R_Bayes)`
for "within 2% of R_Bayes"), and its *change* the sum of the node changes of the runs it compares
(the most the margin can move by between the two node counts). A verdict whose margin is not
larger than that change, or whose claim holds at one node count and not at the other, is "not
resolved by the numerics".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from headflow.dynamics.ode import NodeChange

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_RESOLVED = "not resolved by the numerics"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, NOT_RESOLVED)

SAMPLING_Z = 2.0
"""A margin is resolved when it exceeds the node change plus this many sampling errors."""


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim judged on a long-time result with its node-convergence check.

    **Fields:** `claim` (in words), `holds` (whether the claim holds on the run's nodes),
    `margin` (the distance of the measured quantity from the claim's boundary, ≥ 0), `checks`
    (the [`NodeChange`][]s of the runs the claim compares), `holds_fine` (whether it holds on
    the reruns' nodes; None: not judged there, the margin alone decides), `numbers` (what the
    claim was judged on, for the report)."""

    claim: str
    holds: bool
    margin: float
    checks: tuple[NodeChange, ...]
    holds_fine: bool | None = None
    numbers: dict = dataclasses.field(default_factory=dict)
    error: float = 0.0
    """The sampling error (1σ) of the margin apart from the nodes (e.g. of the Monte Carlo
    R_Bayes); a resolved margin also exceeds `SAMPLING_Z` of it."""

    @property
    def change(self) -> float:
        """The most the margin moves by between the node counts: the sum of the checks'
        changes (inf without a check: nothing shows the result is converged)."""
        if not self.checks:
            return float("inf")
        return float(sum(c.change for c in self.checks))

    @property
    def resolved(self) -> bool:
        """Margin above the node change, and the claim's truth the same at both node counts."""
        if self.holds_fine is not None and self.holds_fine != self.holds:
            return False
        return bool(np.isfinite(self.change)
                    and abs(self.margin) > self.change + SAMPLING_Z * self.error)

    @property
    def word(self) -> str:
        """"reproduced", "not reproduced" or "not resolved by the numerics"."""
        if not self.resolved:
            return NOT_RESOLVED
        return REPRODUCED if self.holds else NOT_REPRODUCED

    def summary(self) -> dict:
        """JSON-able: the claim, the verdict, margin, change, and each check (node counts,
        segment, values)."""
        return {"claim": self.claim, "verdict": self.word, "holds": self.holds,
                "holds_fine": self.holds_fine, "margin": float(self.margin),
                "change": self.change, "sampling_error": float(self.error), "numbers": self.numbers,
                "checks": [c.summary() for c in self.checks]}

    def line(self) -> str:
        """One line for a command's printout."""
        counts = sorted({(c.samples, c.samples_fine) for c in self.checks})
        nodes = ", ".join(f"{a} -> {b}" for a, b in counts) or "no node check"
        err = f", sampling error {self.error:.1e}" if self.error else ""
        return (f"{self.claim}: {self.word} (margin {self.margin:.2e}, node change "
                f"{self.change:.2e}{err}; nodes {nodes})")


def judge(claim: str, holds: bool, margin: float, checks: Sequence[NodeChange], *,
          holds_fine: bool | None = None, numbers: dict | None = None,
          error: float = 0.0) -> Claim:
    """A [`Claim`][] (the one constructor the commands use)."""
    return Claim(claim=claim, holds=bool(holds), margin=abs(float(margin)),
                 checks=tuple(checks), holds_fine=None if holds_fine is None
                 else bool(holds_fine), numbers={} if numbers is None else dict(numbers),
                 error=float(error))


def within(claim: str, value: float, value_fine: float, reference: float, tolerance: float,
           checks: Sequence[NodeChange], *, numbers: dict | None = None,
           error: float = 0.0) -> Claim:
    """The claim `value − reference ≤ tolerance` (e.g. a risk within `tolerance` of R_Bayes):
    margin `|tolerance − (value − reference)|`, judged also on `value_fine`."""
    gap, gap_fine = value - reference, value_fine - reference
    return judge(claim, gap <= tolerance, tolerance - gap, checks,
                 holds_fine=gap_fine <= tolerance, numbers=numbers, error=error)


def below(claim: str, lower: float, upper: float, lower_fine: float, upper_fine: float,
          checks: Sequence[NodeChange], *, numbers: dict | None = None,
          error: float = 0.0) -> Claim:
    """The claim `lower < upper` (e.g. softmax-1's risk below softmax's): margin
    `|upper − lower|`, judged also on the reruns' values."""
    return judge(claim, lower < upper, upper - lower, checks,
                 holds_fine=lower_fine < upper_fine, numbers=numbers, error=error)


def overall(verdicts: Sequence[Claim]) -> str:
    """One word for several verdicts on one claim: "not reproduced" if any is resolved and
    fails, else "not resolved by the numerics" if any is unresolved, else "reproduced"."""
    words = [v.word for v in verdicts]
    if NOT_REPRODUCED in words:
        return NOT_REPRODUCED
    if NOT_RESOLVED in words or not words:
        return NOT_RESOLVED
    return REPRODUCED
