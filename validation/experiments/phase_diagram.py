"""Phase diagram: the phase each grid point of a sweep has reached at `t_max`.

Classes ([`PHASE_CLASSES`][]), in this order of precedence:

- **diverging**: the ODE could not be integrated to `t_max` (overlaps beyond `diverge_at`,
  non-finite, or the step-size controller gave up), or its risk at `t_max` exceeds
  `DIVERGE_RISK` times the risk `Δ² + ρ*` of predicting zero (the norms are still growing
  without bound, just not yet past `diverge_at`);
- **specialized**: the head spread made a persistent crossing of θ (the plateau exit of
  [`headflow.validation.experiments.phases.detect_phases`][],
  [`headflow.dynamics.measures.escape_time`][]);
- **unspecialized plateau**: no escape, but the head-mean alignment `‖mean_h α_h‖` ≥ θ at
  `t_max` (the heads learned the mean direction together);
- **no learning**: neither (the heads are still as unaligned as at the start);
- **max steps**: the solver ran out of steps (`--max-steps`, `ode.max_steps`) before `t_max`:
  nothing can be said about the point.

The grid is a sweep at one dimension `sim.dim` (the start carries its `O(1/√D)` head
differences) and one horizon `t_max`: a plateau point may specialize later (escape grows like
`ln D`). See `docs/phases.md`.
"""

from __future__ import annotations

import numpy as np

from headflow.dynamics.measures import ESCAPE_THRESHOLD, alignment, escape_time

from .sweep import STATUS, SweepResult

PHASE_CLASSES = ("no learning", "unspecialized", "specialized", "diverging", "max steps")
"""The phases of a grid point, indexed by the class codes below."""

NO_LEARNING, UNSPECIALIZED, SPECIALIZED, DIVERGING, MAX_STEPS = range(5)

DIVERGE_RISK = 10.0
"""A final risk above this multiple of `Δ² + ρ*` (the risk of `ŷ ≡ 0`) counts as diverging."""


def classify(result: SweepResult, threshold: float = ESCAPE_THRESHOLD
             ) -> tuple[np.ndarray, np.ndarray]:
    """`(classes (P,), escape times (P,) with NaN where none)` of every grid point."""
    P = len(result.overrides)
    classes = np.zeros(P, dtype=np.int64)
    escape = np.full(P, np.nan)
    t = result.t
    for i in range(P):
        a_name, g_name = result.layout.alignment
        m, q = result.arrays[a_name][i], result.arrays[g_name][i]
        blown = (result.null_risk is not None
                 and not result.risk[i, -1] <= DIVERGE_RISK * result.null_risk[i])
        if result.status[i] == STATUS.index("max_steps"):
            classes[i] = MAX_STEPS          # not integrated to t_max: nothing to classify
            continue
        if result.status[i] != 0 or not np.all(np.isfinite(q)) or blown:
            classes[i] = DIVERGING
            continue
        a = alignment(m, q)
        e = escape_time(t, m, q, threshold)
        if e is not None:
            classes[i] = SPECIALIZED
            escape[i] = e
        elif np.linalg.norm(a[-1].mean(axis=0)) >= threshold:
            classes[i] = UNSPECIALIZED
        else:
            classes[i] = NO_LEARNING
    return classes, escape


def class_names(classes: np.ndarray) -> list[str]:
    return [PHASE_CLASSES[int(c)] for c in classes]
