"""Finite-size scaling of the distance between single SGD runs and the ODE
(`docs/ode.md#finite-size-scaling`).

At every D of a list, [`compare`][headflow.validation.experiments.compare.compare] runs SGD over
the seeds and the ODE from the seed mean of their measured initial overlaps, on one time grid,
every run in its canonical head order. The deviation at D is

    δ(D) = sqrt( mean over seeds i and saved times 0 < t ≤ t_w of |Ω_i(t) − Ω_ODE(t)|² ),

`Ω` every entry of the order parameters the model's [`headflow.dynamics.Layout`][] names (`(m, q,
n, s, b)` for attention, `(Q, R, v)` for the committee machine), over the pre-escape window `t ≤
t_w` of the **smallest** D (the first escape of any of its runs or of its ODE: the plateau lasts
longer at larger D, so this window is inside every D's plateau, and every D is compared over the
same times). `t = 0` is left out: there the deviation is the spread of the initial overlaps
about their seed mean, `∝ D^{-1/2}` by construction and no test of the dynamics.

Before the escape a single run is `Ω_i = Ω_ODE + ξ_i/√D + O(1/D)` with `ξ_i` of order one (the
random start, then the noise of every step), so `δ ∝ D^{-1/2}` at leading order. The slope of
`ln δ` on `ln D` is fitted by `linear_fit`; the claim is
reproduced when `−1/2` lies inside its 95% interval. Diagnostics, not the verdict: the split
`δ² = bias² + spread²` into the seed mean's distance from the ODE (`bias`, whose noise level is
`spread/√seeds`) and the spread of the runs about their seed mean, and the RMS relative deviation
of the risk over the same window.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from headflow.dynamics import ORDER_PARAMETERS, Config, HeadflowError

from ._fit import law_check, linear_fit
from .compare import canonicalize, canonicalize_seeds, compare

SLOPE_EXPECTED = -0.5
"""The leading-order slope of `ln δ` against `ln D`."""

BOOTSTRAP = 400
"""Seed-bootstrap resamples of the error bar of each `δ(D)` (for figures; the fit does not use
it)."""

ROW_KEYS = ("delta", "delta_se", "bias", "spread", "noise_level", "risk_rms")
"""The per-D numbers of a study, each a list over the dimensions in the report and an array in
`scaling.npz`."""


def order_vector(arrays: dict[str, np.ndarray], lead: int,
                 names: Sequence[str] = ORDER_PARAMETERS) -> np.ndarray:
    """Every entry of the order parameters `names` (default the attention model's `(m, q, n,
    s, b)`; a model's `layout.names`) as one vector per time: `lead = 1` for one run
    (`(T, …)` → `(T, P)`), `lead = 2` for seeds (`(S, T, …)` → `(S, T, P)`)."""
    return np.concatenate([np.asarray(arrays[k]).reshape(*np.shape(arrays[k])[:lead], -1)
                           for k in names], axis=-1)


def deviation(sgd: dict[str, np.ndarray], ode: dict[str, np.ndarray], t_window: float, *,
              bootstrap: int = BOOTSTRAP, seed: int = 0,
              names: Sequence[str] = ORDER_PARAMETERS) -> dict:
    """`δ` of the SGD seeds `sgd` (arrays `(S, T, …)`) from the ODE `ode` (`(T, …)`, the same
    grid), both in canonical head order, over the saved times `0 < t ≤ t_window`, on the
    order parameters `names` ([`order_vector`][]).

    **Returns:** `delta`, `delta_se` (seed-bootstrap standard deviation), `bias` and `spread`
    (`δ² = bias² + spread²`, the spread taken about the seed mean without a degrees-of-freedom
    correction so that the identity is exact), `noise_level` (`spread/√S`: the size the bias has
    from the seed mean's own statistical error), `risk_rms` (RMS over seeds and window of the
    relative risk deviation `(R_i − R_ODE)/R_ODE`), `points` (saved times in the window).

    **Raises:** [`HeadflowError`][] when the window holds no saved time after `t = 0`."""
    t = np.asarray(sgd["t"])
    w = (t > 0) & (t <= t_window)
    if not w.any():
        raise HeadflowError(f"finite-size scaling: the pre-escape window 0 < t <= {t_window:.4g} "
                            f"holds no saved time (first save after 0 at t = "
                            f"{t[t > 0].min() if (t > 0).any() else float('nan'):.4g}); save more "
                            "often (output.n_save) or start at a larger dimension")
    X, Xo = order_vector(sgd, 2, names)[:, w], order_vector(ode, 1, names)[w]  # (S,W,P), (W,P)
    sq = ((X - Xo) ** 2).sum(-1)                                         # (S, W)
    mean = X.mean(axis=0)
    rel = (np.asarray(sgd["risk"])[:, w] - ode["risk"][w]) / ode["risk"][w]
    rng = np.random.default_rng(seed)
    S = sq.shape[0]
    boot = np.sqrt(sq[rng.integers(0, S, (bootstrap, S))].mean(axis=(1, 2)))
    spread = float(np.sqrt(((X - mean) ** 2).sum(-1).mean()))
    return {"delta": float(np.sqrt(sq.mean())), "delta_se": float(boot.std()),
            "bias": float(np.sqrt(((mean - Xo) ** 2).sum(-1).mean())), "spread": spread,
            "noise_level": spread / np.sqrt(S), "risk_rms": float(np.sqrt((rel ** 2).mean())),
            "points": int(w.sum())}


def loglog_fit(dims: Sequence[int], values: Sequence[float], level: float = 0.95) -> dict:
    """`linear_fit` of `ln values` on `ln dims`."""
    return linear_fit(np.log(np.asarray(dims, dtype=np.float64)),
                      np.log(np.asarray(values, dtype=np.float64)), level)


def scaling_report(dims: Sequence[int], runs: Sequence[tuple[dict, dict, dict]], *,
                   level: float = 0.95, names: Sequence[str] = ORDER_PARAMETERS) -> dict:
    """The study from `runs`, one `(sgd arrays, ode arrays, compare report)` per D of `dims`
    (ascending; arrays in canonical head order): the window, the per-D rows
    ([`deviation`][]), the log-log fits of `δ` (the verdict) and of the diagnostics, and the
    verdict `reproduced` (`−1/2` inside the interval of `δ`'s slope); and, as a diagnostic,
    `law`: the check of `δ ∝ D^{−1/2}` against the seed-bootstrap errors of `δ`
    (`law_check` on `ln δ`, errors `δ_se/δ`). With few
    D the OLS interval rests on the scatter of a few points, which can be smaller than their
    errors; the check uses the errors. `names`: the order parameters of `δ` (a model's
    `layout.names`), reported as `order_parameters`."""
    if len(dims) < 3:
        raise HeadflowError(f"finite-size scaling: need at least three dimensions for a slope "
                            f"interval, got {len(dims)}")
    t_window = runs[0][2]["pre_escape"]["t_end"]
    rows = [deviation(s, o, t_window, names=names) for s, o, _ in runs]
    fits = {k: loglog_fit(dims, [r[k] for r in rows], level)
            for k in ("delta", "bias", "spread", "risk_rms")}
    lo, hi = fits["delta"]["ci"]
    delta = np.asarray([r["delta"] for r in rows])
    law = law_check(np.log(np.asarray(dims, dtype=np.float64)), np.log(delta),
                    np.asarray([r["delta_se"] for r in rows]) / delta, SLOPE_EXPECTED)
    return {"dims": [int(d) for d in dims], "seeds": int(runs[0][0]["risk"].shape[0]),
            "order_parameters": list(names),
            "t_window": float(t_window), "points": [r["points"] for r in rows],
            **{k: [r[k] for r in rows] for k in ROW_KEYS},
            "slope": fits["delta"]["slope"], "slope_ci": fits["delta"]["ci"],
            "slope_expected": SLOPE_EXPECTED, "level": level,
            "reproduced": bool(lo <= SLOPE_EXPECTED <= hi), "fits": fits, "law": law}


def final_risks(sgd: dict[str, np.ndarray], ode: dict[str, np.ndarray]) -> dict:
    """The risks of the final state: averages over the last fifth of the run (over times, and
    over times and seeds for SGD; `final_risk_sgd_sem` over the seeds' time averages)."""
    last = sgd["t"] >= 0.8 * sgd["t"][-1]
    final = np.asarray(sgd["risk"])[:, last].mean(axis=1)
    return {"final_risk_ode": float(ode["risk"][last].mean()),
            "final_risk_sgd": float(final.mean()),
            "final_risk_sgd_sem": float(final.std(ddof=1) / np.sqrt(len(final)))
            if len(final) > 1 else 0.0}


def figure_arrays(report: dict, runs: Sequence[tuple[dict, dict, dict]]
                  ) -> dict[str, np.ndarray]:
    """The arrays of the figure and of `scaling.npz`: `t`, `dims`, per D the SGD seed mean and
    standard deviation of the risk and the ODE's risk (`(n_D, T)`), and the rows of
    [`ROW_KEYS`][]."""
    t = runs[0][0]["t"]
    return {"t": t, "dims": np.asarray(report["dims"]),
            "risk_sgd_mean": np.stack([s["risk"].mean(axis=0) for s, _, _ in runs]),
            "risk_sgd_std": np.stack([s["risk"].std(axis=0, ddof=1) if s["risk"].shape[0] > 1
                                      else np.zeros_like(t) for s, _, _ in runs]),
            "risk_ode": np.stack([o["risk"] for _, o, _ in runs]),
            **{k: np.asarray(report[k]) for k in ROW_KEYS}}


def compare_at(cfg: Config, D: int, *, seeds: int | None = None,
               weights_up_to: int | None = None, progress: bool = False
               ) -> tuple[dict, dict, dict, str]:
    """[`compare`][headflow.validation.experiments.compare.compare] (`theory = "ode"`) at D: the SGD
    seeds' and the ODE's arrays in canonical head order, the report, and the SGD space (the
    config's `sim.space`, or with `weights_up_to` weight space for `D ≤ weights_up_to` and the
    exact overlap chain above: `docs/overlap-sgd.md`, the same law at a cost per step
    independent of D)."""
    space = (cfg.sim.space if weights_up_to is None
             else "weights" if D <= weights_up_to else "overlaps")
    sgd, ode, rep = compare(cfg.replace(**{"sim.dim": int(D), "sim.space": space}), seeds=seeds,
                            theory="ode", progress=progress)
    layout = cfg.build_model().layout
    return (canonicalize_seeds(sgd.arrays(), layout), canonicalize(ode.arrays(), layout), rep,
            space)


def scaling_study(cfg: Config, dims: Sequence[int], *, seeds: int | None = None,
                  weights_up_to: int | None = None, progress: bool = False,
                  on_dim: Callable[[int, dict], None] | None = None
                  ) -> tuple[dict, dict[str, np.ndarray]]:
    """[`compare_at`][] every D of `dims`; returns the [`scaling_report`][] (with `per_dim`:
    each D's SGD space, escapes, window, [`final_risks`][] and wall time) and the
    [`figure_arrays`][]. `on_dim(D, row)` is called after each D with its `per_dim` row."""
    dims = sorted(int(d) for d in dims)
    runs, rows = [], []
    for D in dims:
        t0 = time.perf_counter()
        s, o, rep, space = compare_at(cfg, D, seeds=seeds, weights_up_to=weights_up_to,
                                      progress=progress)
        runs.append((s, o, rep))
        rows.append({"dim": D, "space": space, "wall_s": time.perf_counter() - t0,
                     "sgd_escaped": rep["escape"]["sgd_escaped"],
                     "ode_escape": rep["escape"]["ode"], "t_window": rep["pre_escape"]["t_end"],
                     **final_risks(s, o)})
        if on_dim is not None:
            on_dim(D, rows[-1])
    report = scaling_report(dims, runs, names=cfg.build_model().layout.names)
    report["per_dim"] = rows
    return report, figure_arrays(report, runs)
