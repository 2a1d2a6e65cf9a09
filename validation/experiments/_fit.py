"""Ordinary least squares of one variable on another, with a Student-t interval for the slope:
the one fit behind every slope that the experiments report (escape time against `ln D`, the
ODE–SGD deviation against `ln D`); and the check of a line of given slope against points with
known errors."""

from __future__ import annotations

import numpy as np


def linear_fit(x, y, level: float = 0.95) -> dict:
    """OLS of `y` on `x` (1-D, the same length, at least three points and two distinct `x`):
    `slope`, `intercept`, `stderr` (of the slope), `ci` (its two-sided Student-t interval at
    `level` with `n − 2` degrees of freedom, so that the scatter about the line sets the
    width), `level`, `runs` (points) and `dof`."""
    from scipy import stats      # on first use: `scipy.stats` takes about a second to import

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    fit = stats.linregress(x, y)
    dof = len(y) - 2
    half = float(stats.t.ppf(0.5 + level / 2, dof)) * fit.stderr
    return {"slope": float(fit.slope), "intercept": float(fit.intercept),
            "stderr": float(fit.stderr), "ci": [float(fit.slope - half), float(fit.slope + half)],
            "level": level, "runs": int(len(y)), "dof": int(dof)}


def law_check(x, y, sigma, slope: float) -> dict:
    """How well lines fit points `y` with known standard errors `sigma` (1-D, the same length,
    at least three points and two distinct `x`), using those errors rather than the scatter:

    - `weighted_slope`, `weighted_stderr`: the weighted least-squares slope (weights
      `1/sigma²`) and its standard error from `sigma`;
    - `chi2`, `dof`, `p`: the χ² of `y` about the best line of the given `slope` (intercept
      free), with `n − 1` degrees of freedom, and the probability of a χ² at least as large
      if that law holds and the errors are Gaussian."""
    from scipy import stats

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    sigma = np.asarray(sigma, dtype=np.float64)
    coef, cov = np.polyfit(x, y, 1, w=1.0 / sigma, cov="unscaled")
    w = 1.0 / sigma**2
    resid = y - slope * x
    resid = resid - np.sum(w * resid) / np.sum(w)          # the best intercept for that slope
    chi2 = float(np.sum(w * resid**2))
    dof = len(y) - 1
    return {"slope": float(slope), "weighted_slope": float(coef[0]),
            "weighted_stderr": float(np.sqrt(cov[0, 0])), "chi2": chi2, "dof": int(dof),
            "p": float(stats.chi2.sf(chi2, dof))}
