"""Escape times from the unspecialized plateau versus D (`docs/phases.md`): SGD measurements
against the linear-stability prediction of [`headflow.dynamics.analysis`][].

- **measured**: for each D and seed, online SGD from a random start; the escape time is the
  persistent crossing of the head spread `max_f max_{h,h'} |α_hf − α_h'f|` through θ
  ([`headflow.dynamics.measures.escape_time`][], the plateau exit of
  [`headflow.validation.experiments.phases.detect_phases`][]). Slope in `ln D` by ordinary least
  squares over every
  run that escaped, with a Student-t 95% interval.
- **predicted**: the symmetric trajectory and the tangent-linear propagator `Φ(t)` of the head
  differences along it; the linearized head spread of a random start at dimension D is
  `S_j(t)/√D`, `S_j` for draws `j` of the initialization law. The median draw escapes when
  `ln S(t) = ln θ + ½ ln D + c'` — i.e. `∫λ = ½ ln D + c`. `c' = 0` is the parameter-free
  prediction from the initial perturbation alone; SGD keeps injecting `O(1/√D)` noise during the
  plateau, which raises the effective amplitude by a D-independent factor, so the main
  prediction fits `c'` (one number: where on the growth curve the escapes happen) and predicts
  the *slope*, `d t_esc / d ln D = 1/(2λ(t_esc))`, from the growth rate alone. Reports call
  it the **calibrated** prediction.
- **SDE** (parameter-free): paths of the overlaps' diffusion limit
  ([`headflow.dynamics.sde.run_sde`][], `docs/sde.md`) at each D, each from its own random start at
  D, with the escape time measured on every path exactly as on an SGD run. Nothing is fitted: its
  mean, median and 10/90% quantiles per D, its slope in `ln D` by the same least-squares fit as the
  measured one ([`fit_slope`][]), and the same statistics at dimensions SGD cannot reach (the SDE's
  cost does not depend on D). Censored paths (no escape by `t_max`) are counted and left out of
  means and fits, as for SGD.

Any model of the family runs through it: "heads" are its student units and the escape is the
crossing of the observable the model declares (`escape_observable`: the spread of the alignment
arrays its [`headflow.dynamics.Layout`][] names, `(R, Q)` for the committee machine,
`docs/committee.md`; the alignment `|R|/√(QT)` of a single student). The linear-stability
prediction is written for the attention model's heads and for the student units of a model of
the family (`docs/committee.md`); both through
[`headflow.dynamics.analysis.linear_stability`][] on the modes of
[`headflow.dynamics.analysis.default_modes`][].

Decisions and their reasons: `docs/phases.md`.
"""

from __future__ import annotations

import dataclasses
import time

import jax.random as jr
import numpy as np
from headflow.dynamics import Config, ConfigError, DivergenceError, HeadflowError, StepSizes
from headflow.dynamics import analysis as stab
from headflow.dynamics.measures import (
                                        ESCAPE_THRESHOLD,
                                        escape_crossing,
                                        escape_quantiles,
                                        persistent_crossing,
                                        )
from headflow.dynamics.models.attention import ManifoldField, symmetric_start
from headflow.dynamics.ode import BLOWUP, Integrator, backend_of, build_field, model_arrays
from headflow.dynamics.sde import SDEResult, run_sde
from headflow.sims import simulate_states

from ..verdicts import Verdict, ks_distance, overall, spread_gap, verdict
from ._constants import EXTRAPOLATE as EXTRAPOLATE  # light: shown by `--help`
from ._fit import linear_fit
from .compare import SPREAD_TOLERANCE, escapes_of

DRAWS = 512
"""Draws of the initialization law used for the linear prediction."""

DRAW_DIM = 4096
"""Dimension at which those draws are made (the law of `√D ×` the head differences barely
depends on D)."""

STAT_QUANTILES = (0.1, 0.5, 0.9)
"""The escape-time quantiles of the per-D statistics ([`escape_stats`][])."""


@dataclasses.dataclass
class LinearTheory:
    """The linear-stability side: the [`headflow.dynamics.analysis.StabilityResult`][], the per-draw
    log linear spread `log_spread (n, T)` at D = 1, and its median `median_log (T)`."""

    result: stab.StabilityResult
    log_spread: np.ndarray
    threshold: float

    @property
    def t(self) -> np.ndarray:
        return np.asarray(self.result.t)

    @property
    def median_log(self) -> np.ndarray:
        return np.median(self.log_spread, axis=0)

    def escape_times(self, dims, offset: float = 0.0) -> np.ndarray:
        """Median-draw escape time for each D: first time the median log spread reaches
        `ln θ + ½ ln D + offset` after its last visit below `ln(θ/2) + ½ ln D + offset`
        (NaN if not within the integrated range)."""
        levels = np.log(self.threshold) + 0.5 * np.log(np.atleast_1d(dims)) + offset
        return np.array([_log_crossing(self.t, self.median_log, lev) for lev in levels])

    def draw_escape_times(self, dims) -> np.ndarray:
        """Per-draw escape times `(n, len(dims))` with no offset (the parameter-free
        distribution from the initial perturbation alone)."""
        levels = np.log(self.threshold) + 0.5 * np.log(np.asarray(dims, dtype=np.float64))
        out = np.full((self.log_spread.shape[0], len(levels)), np.nan)
        for j, lev in enumerate(levels):
            for i, row in enumerate(self.log_spread):
                out[i, j] = _log_crossing(self.t, row, lev)
        return out

    def rate_at(self, times) -> tuple[np.ndarray, np.ndarray]:
        """`(λ(t), d ln S/dt)` at the given times: the instantaneous eigenvalue and the
        growth rate of the median linear spread."""
        t = self.t
        lam = np.interp(times, t, np.asarray(self.result.growth_rate))
        ftr = np.interp(times, t, np.gradient(self.median_log, t))
        return lam, ftr


def _log_crossing(t: np.ndarray, log_x: np.ndarray, level: float) -> float:
    """Persistent crossing of `level` by `log_x` (hysteresis: `level − ln 2`, i.e. θ/2), with
    linear interpolation of the log (exact for an exponential); NaN if none."""
    c = persistent_crossing(t, log_x, level, lower=level - np.log(2.0))
    return np.nan if c is None else c


def manifold_field(cfg: Config, model=None, *, equivariant: bool = True):
    """The manifold vector field of a configuration for stability analysis: with nodes closed
    under all head permutations ([`headflow.dynamics.analysis.equivariant_field`][]), or the
    engine's field (`equivariant=False`)."""

    model = cfg.build_model() if model is None else model
    steps = StepSizes.from_config(cfg.training)
    if equivariant:
        return stab.equivariant_field(model, steps, backend_of(cfg), sgd_noise=cfg.ode.sgd_noise)
    return ManifoldField.build(model, steps, backend_of(cfg), sgd_noise=cfg.ode.sgd_noise)


def linear_theory_reason(cfg: Config) -> str | None:
    """Why the linear-stability prediction is not computed for `cfg` (None: it is). It is
    computed for the attention model (head-difference modes,
    [`headflow.dynamics.analysis.HeadModes`][]) and for every model of the family with at least two
    student units (unit-difference modes, [`headflow.dynamics.analysis.UnitModes`][])."""
    model = cfg.build_model()
    if cfg.model_kind == "attention" or getattr(model, "n_students", 0) >= 2:
        return None
    return (f"the linear-stability prediction needs at least two interchangeable units "
            f"(model.kind = {cfg.model_kind!r}); the SDE prediction is computed")


def linear_theory(cfg: Config, *, t_max: float | None = None, n_times: int = 121,
                  threshold: float = ESCAPE_THRESHOLD, draws: int = DRAWS,
                  equivariant: bool = True, seed: int = 0) -> LinearTheory:
    """Integrate the symmetric trajectory and its tangent-linear propagator on
    `[0, t_max]` (default `training.t_max`) and the linear spread of `draws` random starts."""
    model = cfg.build_model()
    tr, o = cfg.training, cfg.ode
    modes = stab.default_modes(model)
    if cfg.model_kind == "attention":
        field = manifold_field(cfg, model, equivariant=equivariant)
        init = {"key_std": tr.init_key_std, "value_std": tr.init_value_std, "bias": tr.init_bias}
        ov0 = symmetric_start(model, **init)
    else:
        # the model's own field (closed forms where they exist: exactly unit-equivariant) from
        # the D → ∞ start
        field, init, ov0 = build_field(cfg, model), {}, model.limit_state()
    t_end = tr.t_max if t_max is None else t_max
    ts = np.linspace(0.0, t_end, n_times)
    integrator = Integrator.from_config(o, rtol=min(o.rtol, 1e-6), atol=min(o.atol, 1e-8),
                                        blowup=None)
    res = stab.linear_stability(field, ov0, ts, modes=modes, integrator=integrator)
    coef = stab.initial_contrasts(model, jr.key(seed), modes, n=draws, dim=DRAW_DIM, **init)
    spread = stab.linear_spread(res, modes, coef)
    with np.errstate(divide="ignore"):
        logs = np.log(np.maximum(spread, 1e-300))
    return LinearTheory(result=res, log_spread=logs, threshold=threshold)


def sgd_escape_times(cfg: Config, dims, seeds: int, *, t_max: float | None = None,
                     n_save: int | None = None, threshold: float = ESCAPE_THRESHOLD,
                     progress: bool = False) -> tuple[np.ndarray, list[np.ndarray]]:
    """Escape time of every SGD run, `(len(dims), seeds)` with NaN where the run did not
    escape before `t_max`; and the trajectories `(seeds, T)` per D of the model's escape
    observable (`escape_observable`, whose [`escape_crossing`][] of `threshold` is the escape:
    the head spread of `(m, q)` for attention heads, of `(R, Q)` for committee units, the
    alignment `|R|/√(QT)` of a single student)."""
    tr = cfg.training
    t_max = tr.t_max if t_max is None else t_max
    n_save = cfg.output.n_save if n_save is None else n_save
    times = np.linspace(0.0, t_max, n_save)
    seed_list = list(range(cfg.sim.seed, cfg.sim.seed + seeds))
    out = np.full((len(dims), seeds), np.nan)
    spreads = []
    for i, D in enumerate(dims):
        t, x = _sgd_observable(cfg, int(D), seed_list, times, progress)
        spreads.append(x)                                                # (S, T)
        for s in range(seeds):
            c = escape_crossing(t, x[s], threshold)
            out[i, s] = np.nan if c is None else c
    return out, spreads


def _sgd_observable(cfg: Config, D: int, seed_list: list[int], times: np.ndarray,
                    progress: bool) -> tuple[np.ndarray, np.ndarray]:
    """`(t, x)`: the times and the model's escape observable `(seeds, T)` of SGD at D over
    `seed_list`."""
    t, arrays = sgd_arrays(cfg, D, seed_list, times, progress=progress)
    return t, np.asarray(cfg.build_model().escape_observable(arrays))


def sgd_arrays(cfg: Config, D: int, seed_list: list[int], times: np.ndarray, *,
               progress: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """`(t, arrays)`: the times and the named order parameters `(seeds, T, ...)` of SGD at D
    over `seed_list`, each seed from its random start (the risk is not recorded: the escape
    does not need it)."""
    model = cfg.build_model()
    steps, states = simulate_states(model, cfg, dim=D, seeds=seed_list, times=times,
                                    start=None, progress=progress)
    return np.asarray(steps) / D, model_arrays(model, states)


def fit_slope(dims, times: np.ndarray, level: float = 0.95) -> dict:
    """Ordinary least squares of `t_esc` on `ln D` over every finite entry of
    `times (len(dims), seeds)`; slope, intercept, standard error and the Student-t interval
    at `level`.

    **Raises:** [`HeadflowError`][] with fewer than two distinct D or three runs."""
    x = np.repeat(np.log(np.asarray(dims, dtype=np.float64)), times.shape[1])
    y = times.ravel()
    ok = np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(np.unique(x)) < 2 or len(y) < 3:
        raise HeadflowError("escape: fewer than two dimensions (or three runs) escaped before "
                            "t_max; raise training.t_max or use more seeds")
    return linear_fit(x, y, level)


def calibrate_offset(theory: LinearTheory, dims, times: np.ndarray) -> float:
    """The offset `c'` that makes the median-draw prediction pass through the measured escape
    times (least squares over the runs that escaped)."""
    dims = np.asarray(dims, dtype=np.float64)
    means = np.array([np.nanmean(r) if np.isfinite(r).any() else np.nan for r in times])
    counts = np.isfinite(times).sum(axis=1)

    def loss(c):
        pred = theory.escape_times(dims, c)
        res = np.where(np.isfinite(pred), pred - means, theory.t[-1] - means)
        w = np.where(np.isfinite(means), counts, 0)
        return float(np.sum(w * np.nan_to_num(res) ** 2))

    lo, hi = -40.0, 40.0
    grid = np.linspace(lo, hi, 161)
    best = grid[int(np.argmin([loss(c) for c in grid]))]
    from scipy import optimize

    r = optimize.minimize_scalar(loss, bounds=(best - 0.5, best + 0.5), method="bounded",
                                 options={"xatol": 1e-6})
    return float(r.x)


def predicted_slope(theory: LinearTheory, dims, times: np.ndarray, offset: float) -> float:
    """The slope in `ln D` of the predicted escape times over the measured dimensions, each D
    weighted by its number of escaped runs (as in the OLS fit of the data)."""
    x = np.log(np.asarray(dims, dtype=np.float64))
    pred = theory.escape_times(dims, offset)
    w = np.isfinite(times).sum(axis=1) * np.isfinite(pred)
    if np.count_nonzero(w) < 2:
        raise HeadflowError("escape: the linear theory does not reach the escape threshold "
                            "within t_max for two dimensions; raise training.t_max")
    xm = np.sum(w * x) / w.sum()
    ym = np.sum(w * np.nan_to_num(pred)) / w.sum()
    return float(np.sum(w * (x - xm) * (np.nan_to_num(pred) - ym)) / np.sum(w * (x - xm) ** 2))


def escape_stats(times, level: float = 0.95) -> dict:
    """Statistics of one ensemble's escape times (`times (n,)`, NaN: censored, i.e. no escape
    by `t_max`), for SGD runs and SDE paths alike.

    **Returns:** `mean` and `sem` over the escaped runs (None with fewer than one / two), `ci`
    (the Student-t interval of the mean at `level`, None with fewer than two), `quantiles`
    ([`STAT_QUANTILES`][] by [`headflow.dynamics.measures.escape_quantiles`][]: a censored run
    counts as +∞, so a quantile beyond the escaped fraction is +∞, `null` in JSON), `median`,
    `runs`, `escaped`, `censored` and `escaped_fraction`. The mean leaves the censored runs out
    and so is biased low when any are."""
    from scipy import stats

    e = np.asarray(times, dtype=np.float64).ravel()
    ok = np.isfinite(e)
    n = int(ok.sum())
    mean = float(e[ok].mean()) if n else None
    sem = float(e[ok].std(ddof=1) / np.sqrt(n)) if n > 1 else None
    ci = None
    if sem is not None and mean is not None:
        half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sem
        ci = [mean - half, mean + half]
    q = escape_quantiles(e, STAT_QUANTILES)
    return {"mean": mean, "sem": sem, "ci": ci, "median": q["0.5"], "quantiles": q,
            "runs": int(len(e)), "escaped": n, "censored": int(len(e) - n),
            "escaped_fraction": n / len(e) if len(e) else None}


@dataclasses.dataclass
class SDEEscapes:
    """Escape times of SDE paths: `times (len(dims), paths)` (NaN: no escape by `t_max`),
    per D the number of paths that left the PSD domain (`invalid`, kept as computed) and the
    run's settings (`info`, from [`headflow.dynamics.sde.SDEResult`][]), and the wall time."""

    dims: list[int]
    times: np.ndarray
    invalid: list[int]
    info: dict
    wall_s: float


def bounded_sde(cfg: Config, D: int, paths: int, *, progress: bool = False) -> SDEResult:
    """`paths` SDE paths of `cfg` at D ([`headflow.dynamics.sde.run_sde`][]).

    **Raises:** [`headflow.dynamics.DivergenceError`][] when any path diverges (NaN/inf or
    overlaps above the blow-up level), as `headflow sde` does; paths that only left the PSD
    cone are kept."""
    res = run_sde(cfg, dim=D, paths=int(paths), progress=progress)
    bounded = res.paths_bounded
    if not bounded.all():
        bad = np.flatnonzero(~bounded)
        first = np.asarray(res.first_invalid)[bad]
        raise DivergenceError(
            f"{len(bad)} of {len(bounded)} SDE paths at D = {D} diverged (NaN/inf or "
            f"overlaps above {BLOWUP:.0e}; first at t = {np.nanmin(first):.4g}, path "
            f"{int(bad[0])}); try a smaller sde.dt (now {cfg.sde.dt:g}) or training.lr")
    return res


def sde_escape_times(cfg: Config, dims, paths: int, *, threshold: float = ESCAPE_THRESHOLD,
                     progress: bool = False) -> SDEEscapes:
    """Run `paths` paths of the overlaps' SDE at each D of `dims` to `training.t_max` (on the
    `[output]` grid, `[sde]` settings) and measure each path's escape time with
    [`headflow.dynamics.measures.escape_crossing`][] of `threshold` by the model's
    `escape_observable`, as for SGD.

    **Raises:** [`headflow.dynamics.DivergenceError`][] when any path diverges (NaN/inf or overlaps
    above the blow-up level), as `headflow sde` does; paths that only left the PSD cone are kept and
    counted."""

    dims = [int(d) for d in dims]
    model = cfg.build_model()
    out = np.full((len(dims), int(paths)), np.nan)
    invalid, info, t0 = [], {}, time.perf_counter()
    for i, D in enumerate(dims):
        res = bounded_sde(cfg, D, int(paths), progress=progress)
        esc = escapes_of(np.asarray(res.t), res.arrays(), model.layout, threshold=threshold,
                         observable=model.escape_observable)
        out[i] = [np.nan if c is None else c for c in esc]
        invalid.append(int((~res.paths_valid).sum()))
        info = {k: v for k, v in res.info.items() if k not in ("dim", "first_group_s",
                                                                "solve_s")}
    return SDEEscapes(dims=dims, times=out, invalid=invalid, info=info,
                      wall_s=time.perf_counter() - t0)


def _slope_or_reason(dims, times: np.ndarray) -> tuple[dict | None, str | None]:
    """[`fit_slope`][], or `(None, why)` when too few runs escaped."""
    if len(dims) == 0:
        return None, "no dimensions"
    try:
        return fit_slope(dims, times), None
    except HeadflowError as err:
        return None, str(err)


def sde_report(dims, measured: np.ndarray, sde: np.ndarray, *, extrapolate=(),
               sde_extrapolate: np.ndarray | None = None, level: float = 0.95) -> dict:
    """The SDE side of the report from escape times alone (NaN: censored): SGD
    `measured (len(dims), seeds)`, SDE `sde (len(dims), paths)` at the same dimensions and
    `sde_extrapolate (len(extrapolate), paths)` beyond them.

    **Returns:** `slope_sde` (its `slope_sde_ci`, `slope_sde_stderr`, `intercept_sde`: the
    same OLS as the measured slope, [`fit_slope`][]; None with `slope_sde_reason` when fewer
    than two dimensions escaped), `escape_sde_mean`, `escape_sde_sem`, `escape_sde_median`,
    `escape_sde_quantiles`, `escape_sde_escaped_fraction`, `escape_sde_censored` (one per D),
    `extrapolation` (per D: `dim` and the [`escape_stats`][]), `slope_sde_all` (the fit over
    both sets of dimensions), and the verdict: `agrees_sde_mean` (per D: the SDE mean inside
    the measured `level` interval of the mean; None where either is missing),
    `agrees_sde_slope` (slope_sde inside the measured slope's interval) and `agrees_sde`
    (both, at every D)."""
    dims = [int(d) for d in dims]
    meas = [escape_stats(r, level) for r in measured]
    st = [escape_stats(r, level) for r in sde]
    fit, why = _slope_or_reason(dims, sde)
    mfit, _ = _slope_or_reason(dims, measured)
    agree_mean = [None if a["ci"] is None or b["mean"] is None
                  else bool(a["ci"][0] <= b["mean"] <= a["ci"][1]) for a, b in zip(meas, st)]
    agree_slope = (None if fit is None or mfit is None
                   else bool(mfit["ci"][0] <= fit["slope"] <= mfit["ci"][1]))
    verdicts = [*agree_mean, agree_slope]
    ext = [int(d) for d in extrapolate]
    ext_times = (np.empty((0, sde.shape[1])) if sde_extrapolate is None
                 else np.asarray(sde_extrapolate, dtype=np.float64))
    if len(ext) != len(ext_times):
        raise ValueError(f"{len(ext)} extrapolation dimensions, {len(ext_times)} rows of times")
    fit_all, _ = (_slope_or_reason(dims + ext, np.concatenate([sde, ext_times]))
                  if ext else (None, None))
    return {
        "slope_sde": None if fit is None else fit["slope"],
        "slope_sde_ci": None if fit is None else fit["ci"],
        "slope_sde_stderr": None if fit is None else fit["stderr"],
        "intercept_sde": None if fit is None else fit["intercept"],
        "slope_sde_reason": why,
        "escape_sde_mean": [s["mean"] for s in st],
        "escape_sde_sem": [s["sem"] for s in st],
        "escape_sde_median": [s["median"] for s in st],
        "escape_sde_quantiles": [s["quantiles"] for s in st],
        "escape_sde_escaped_fraction": [s["escaped_fraction"] for s in st],
        "escape_sde_censored": [s["censored"] for s in st],
        "extrapolation": [{"dim": d, **escape_stats(r, level)} for d, r in zip(ext, ext_times)],
        "slope_sde_all": None if fit_all is None else fit_all["slope"],
        "agrees_sde_mean": agree_mean,
        "agrees_sde_slope": agree_slope,
        "agrees_sde": (None if any(v is None for v in verdicts) else all(verdicts)),
    }


def _linear_prediction(theory: LinearTheory, dims: list[int], times: np.ndarray, fit: dict,
                       t_max: float) -> tuple[dict, dict]:
    """The linear-stability keys of the report (calibrated offset, predicted slope and escape
    times, growth rates at the escape) and their arrays."""
    offset = calibrate_offset(theory, dims, times)
    slope_pred = predicted_slope(theory, dims, times, offset)
    pred = theory.escape_times(dims, offset)
    pred0 = theory.escape_times(dims, 0.0)
    try:
        slope_pred0 = predicted_slope(theory, dims, times, 0.0)
    except HeadflowError:
        slope_pred0 = None
    lam_eig, lam_tl = theory.rate_at(np.nan_to_num(pred, nan=t_max))
    log_growth = np.asarray(theory.result.log_growth)
    c_eig = np.interp(np.nan_to_num(pred, nan=t_max), theory.t, log_growth) - 0.5 * np.log(dims)
    lam_eff = 1.0 / (2.0 * slope_pred) if slope_pred > 0 else None
    rates = np.asarray(theory.result.growth_rate)
    k = int(np.argmax(rates))
    report = {
        "lambda": lam_eff,
        "slope_predicted": slope_pred,
        "agrees": (bool(fit["ci"][0] <= slope_pred <= fit["ci"][1]) if lam_eff is not None
                   else None),
        "agrees_reason": (None if lam_eff is not None else
                          "no prediction: the linear theory's escape times do not grow with "
                          "ln D over these dimensions (raise training.t_max or use dimensions "
                          "whose runs escape)"),
        "slope_predicted_initial": slope_pred0,
        "offset": offset,
        "escape_predicted": [None if np.isnan(p) else float(p) for p in pred],
        "escape_predicted_initial": [None if np.isnan(p) else float(p) for p in pred0],
        "lambda_at_escape": [float(x) for x in lam_eig],
        "growth_rate_at_escape": [float(x) for x in lam_tl],
        "c_eigenvalue_formula": [float(x) for x in c_eig],
        "lambda_max": float(rates[k]), "t_lambda_max": float(theory.t[k]),
        "eigenvector_labels": list(theory.result.labels),
        "eigenvector_at_escape": [float(x) for x in np.asarray(theory.result.eigenvector)[
            int(np.argmin(np.abs(theory.t - np.nan_to_num(np.nanmedian(pred), nan=t_max))))]],
    }
    res = theory.result
    arrays = {"t": theory.t, "growth_rate": np.asarray(res.growth_rate),
              "log_growth": log_growth, "finite_time_rate": res.finite_time_rate(),
              "median_log_spread": theory.median_log,
              "eigenvector": np.asarray(res.eigenvector),
              **_symmetric_arrays(res.symmetric),
              "predicted": pred, "predicted_initial": pred0,
              "draw_escape_initial": theory.draw_escape_times(dims)}
    return report, arrays


def _symmetric_arrays(sym) -> dict[str, np.ndarray]:
    """The symmetric trajectory in `escape.npz`: the attention model's `symmetric_m` (first
    head) and `symmetric_q` (first two heads); a family model's `symmetric_gram` (the Gram
    matrix, every student alike) and `symmetric_<param>` for each of its parameters."""
    if hasattr(sym, "m"):
        return {"symmetric_m": np.asarray(sym.m[:, 0]),
                "symmetric_q": np.asarray(sym.q[:, :2, :2])}
    return {"symmetric_gram": np.asarray(sym.gram),
            **{f"symmetric_{k}": np.asarray(v) for k, v in sym.params.items()}}


LINEAR_KEYS = ("lambda", "slope_predicted", "agrees", "agrees_reason", "slope_predicted_initial",
               "offset", "escape_predicted", "escape_predicted_initial", "lambda_at_escape",
               "growth_rate_at_escape", "c_eigenvalue_formula", "lambda_max", "t_lambda_max",
               "eigenvector_labels", "eigenvector_at_escape")
"""The report keys of the linear-stability prediction (None where it is not computed)."""


def escape_study(cfg: Config, dims, seeds: int, *, threshold: float = ESCAPE_THRESHOLD,
                 t_max: float | None = None, n_times: int = 121, equivariant: bool = True,
                 sde_paths: int | None = None, extrapolate=(),
                 progress: bool = False) -> tuple[dict, dict]:
    """Measured escape times over `dims × seeds`, the (calibrated) linear-stability prediction
    and, with `sde_paths`, the parameter-free SDE prediction at `dims` and at the dimensions
    of `extrapolate` ([`sde_escape_times`][], [`sde_report`][]).

    Any model of the family: the escape is the crossing of its `escape_observable`. Where the
    linear-stability prediction is not computed ([`linear_theory_reason`][]) its keys
    ([`LINEAR_KEYS`][]) are None, `linear_stability` is false and `linear_stability_reason`
    says why.

    **Returns:** `(report, arrays)`: the report (JSON-able: `lambda`, `slope_predicted`,
    `slope_measured`, `slope_ci`, the SDE keys of [`sde_report`][], and details) and the
    arrays for `escape.npz`/figures.
    """
    dims = [int(d) for d in dims]
    t_max = cfg.training.t_max if t_max is None else float(t_max)
    extrapolate = [int(d) for d in extrapolate] if sde_paths else []
    reason = linear_theory_reason(cfg)
    t0 = time.perf_counter()
    sde = sde_ext = None
    if sde_paths:
        cfg_sde = (cfg if t_max == cfg.training.t_max
                   else cfg.replace(**{"training.t_max": t_max}))
        sde = sde_escape_times(cfg_sde, dims, sde_paths, threshold=threshold, progress=progress)
        if extrapolate:
            sde_ext = sde_escape_times(cfg_sde, extrapolate, sde_paths, threshold=threshold,
                                       progress=progress)
    t_sde = time.perf_counter() - t0
    t0 = time.perf_counter()
    times, spreads = sgd_escape_times(cfg, dims, seeds, t_max=t_max, threshold=threshold,
                                      progress=progress)
    t1 = time.perf_counter()
    theory = (None if reason is not None else
              linear_theory(cfg, t_max=t_max, n_times=n_times, threshold=threshold,
                            equivariant=equivariant))
    t2 = time.perf_counter()
    fit = fit_slope(dims, times)
    if theory is not None:
        linear, linear_arrays = _linear_prediction(theory, dims, times, fit, t_max)
    else:
        linear, linear_arrays = {k: None for k in LINEAR_KEYS}, {}
        linear["agrees_reason"] = reason
    censored = np.isnan(times).sum(axis=1)
    report = {
        "lambda": linear["lambda"],
        "slope_predicted": linear["slope_predicted"],
        "slope_measured": fit["slope"],
        "slope_ci": fit["ci"],
        "slope_stderr": fit["stderr"],
        "intercept_measured": fit["intercept"],
        **{k: linear[k] for k in LINEAR_KEYS[2:6]},
        "dims": dims, "seeds": int(seeds), "threshold": threshold, "t_max": t_max,
        "escape_mean": [float(np.nanmean(r)) if np.isfinite(r).any() else None for r in times],
        "escape_sem": [float(np.nanstd(r, ddof=1) / np.sqrt(np.isfinite(r).sum()))
                       if np.isfinite(r).sum() > 1 else None for r in times],
        "escape_ci": [escape_stats(r)["ci"] for r in times],
        "escape_quantiles": [escape_stats(r)["quantiles"] for r in times],
        "censored": [int(c) for c in censored],
        **{k: linear[k] for k in LINEAR_KEYS[6:]},
        "equivariant_field": equivariant if theory is not None else None,
        "linear_stability": theory is not None,
        "linear_stability_reason": reason,
        "wall_s": {"sgd": t1 - t0, "linear_theory": t2 - t1 if theory is not None else None},
        "sde": sde_paths is not None and sde_paths > 0,
    }
    if sde is not None:
        ext_times = None if sde_ext is None else sde_ext.times
        report.update(sde_report(dims, times, sde.times, extrapolate=extrapolate,
                                 sde_extrapolate=ext_times))
        calibrated = (np.asarray(theory.escape_times(extrapolate, linear["offset"]))
                      if extrapolate and theory is not None
                      else np.full(len(extrapolate), np.nan))
        for entry, c, k in zip(report["extrapolation"], calibrated,
                               [] if sde_ext is None else sde_ext.invalid):
            entry["calibrated"] = None if np.isnan(c) else float(c)
            entry["paths_invalid"] = k
        assert sde_paths is not None
        report["paths_sde"] = int(sde_paths)
        report["sde_paths_invalid"] = sde.invalid
        report["sde_settings"] = sde.info
        report["wall_s"]["sde"] = t_sde
    arrays = {"dims": np.asarray(dims), "escape_times": times,
              "sgd_t": np.linspace(0.0, t_max, cfg.output.n_save),
              "sgd_spread": np.stack(spreads), **linear_arrays}
    if sde is not None:
        arrays["sde_escape_times"] = sde.times
        arrays["extrapolate_dims"] = np.asarray(extrapolate, dtype=np.int64)
        arrays["extrapolate_escape_times"] = (np.empty((0, int(sde_paths or 0))) if sde_ext is None
                                              else sde_ext.times)
        arrays["calibrated_extrapolate"] = np.asarray(
            [np.nan if e["calibrated"] is None else e["calibrated"]
             for e in report["extrapolation"]], dtype=np.float64)
    return report, arrays


__all__ = ["LinearTheory", "linear_theory", "linear_theory_reason", "LINEAR_KEYS",
           "escape_distributions", "KS_TOLERANCE",
           "sgd_escape_times", "fit_slope", "calibrate_offset", "predicted_slope",
           "escape_stats", "SDEEscapes", "sde_escape_times", "sde_report", "escape_study",
           "EXTRAPOLATE", "STAT_QUANTILES"]


KS_TOLERANCE = 0.3
"""The KS distance between two escape-time laws that still counts as agreement in
[`escape_distributions`][]."""


def law_verdicts(a: np.ndarray, b: np.ndarray) -> dict[str, Verdict]:
    """Two ensembles' escape-time laws compared (`a`, `b`: escape times, NaN where censored):
    `ks`, the Kolmogorov–Smirnov distance with a censored run at `+∞` (tolerance
    [`KS_TOLERANCE`][]), and `spread`, that of the runs that escaped (tolerance
    [`headflow.validation.experiments.compare.SPREAD_TOLERANCE`][], as for `compare`)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return {"ks": verdict(a, b, ks_distance, tolerance=KS_TOLERANCE),
            "spread": verdict(a[np.isfinite(a)], b[np.isfinite(b)], spread_gap,
                              tolerance=SPREAD_TOLERANCE)}


def escape_distributions(cfg: Config, dim: int, runs: int, *,
                         weight_runs: int | None = None, threshold: float = ESCAPE_THRESHOLD,
                         progress: bool = False) -> dict:
    """The escape-time distribution from the plateau at one `dim`: `runs` SDE paths, `runs`
    overlap-space and `weight_runs` (default `runs`) weight-space SGD seeds (to
    `training.t_max`), and the verdicts ([`headflow.validation.verdicts.verdict`][]) of the SDE
    against each SGD ensemble and of the two SGD ensembles against each other, on the KS distance
    (tolerance [`KS_TOLERANCE`][]) and on the spread (tolerance
    [`headflow.validation.experiments.compare.SPREAD_TOLERANCE`][], as for `compare`). A path or run
    that does not escape counts as `+∞` in the KS distance; the spread is that of the runs that
    escaped. Weight-space seeds cost `O(D)` a step, the others do not: at large D, fewer of
    them (`weight_runs`; 0 leaves them out, and the pairs with them) keep the run affordable,
    and the verdicts that involve them are decided at their size.

    **Returns:** `times` (`sde`, `weights`, `overlaps`: arrays of their runs, NaN where
    censored), `runs` (per ensemble), `stats` (per ensemble, [`escape_stats`][]) and `verdicts`
    (per pair, per statistic, the [`headflow.validation.verdicts.Verdict`][] as a dict) with
    `overall`."""

    counts = {"sde": int(runs), "weights": int(runs if weight_runs is None else weight_runs),
              "overlaps": int(runs)}
    if counts["sde"] < 1 or counts["weights"] < 0:
        raise ConfigError(f"escape_distributions: runs = {runs} must be >= 1 and weight_runs = "
                          f"{weight_runs} >= 0")
    times = {"sde": sde_escape_times(cfg, [dim], runs, threshold=threshold,
                                     progress=progress).times[0]}
    # independent starts: the two spaces draw a seed's start from the same weights, so the
    # overlap chain's seeds follow the weight-space ones
    first = {"weights": cfg.sim.seed, "overlaps": cfg.sim.seed + max(counts["sde"],
                                                                      counts["weights"])}
    for space in ("weights", "overlaps"):
        if counts[space] == 0:
            continue
        c = cfg.replace(**{"sim.space": space, "sim.seed": first[space]})
        times[space] = sgd_escape_times(c, [dim], counts[space], threshold=threshold,
                                        progress=progress)[0][0]
    verdicts: dict = {}
    words = []
    for a, b in (("sde", "weights"), ("sde", "overlaps"), ("weights", "overlaps")):
        if a not in times or b not in times:
            continue
        pair = law_verdicts(times[a], times[b])
        verdicts[f"{a}_vs_{b}"] = {k: v.to_dict() for k, v in pair.items()}
        words += [v.word for v in pair.values()]
    return {"dim": int(dim), "runs": {k: n for k, n in counts.items() if k in times},
            "times": times, "stats": {k: escape_stats(v) for k, v in times.items()},
            "verdicts": verdicts, "overall": overall(words)}
