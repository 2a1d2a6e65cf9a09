"""Ordinary least squares of one variable on another, with a Student-t interval for the slope:
the one fit behind every slope that the experiments report (escape time against `ln D`, the
ODE–SGD deviation against `ln D`)."""

from __future__ import annotations

import numpy as np
from scipy import stats


def linear_fit(x, y, level: float = 0.95) -> dict:
    """OLS of `y` on `x` (1-D, the same length, at least three points and two distinct `x`):
    `slope`, `intercept`, `stderr` (of the slope), `ci` (its two-sided Student-t interval at
    `level` with `n − 2` degrees of freedom, so that the scatter about the line sets the
    width), `level`, `runs` (points) and `dof`."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    fit = stats.linregress(x, y)
    dof = len(y) - 2
    half = float(stats.t.ppf(0.5 + level / 2, dof)) * fit.stderr
    return {"slope": float(fit.slope), "intercept": float(fit.intercept),
            "stderr": float(fit.stderr), "ci": [float(fit.slope - half), float(fit.slope + half)],
            "level": level, "runs": int(len(y)), "dof": int(dof)}
