"""Escape laws of single-index models against D (`docs/index-models.md`): the time a student
takes to leave a random start, measured on SDE paths or on SGD runs (weights or the exact
overlap chain) at several D, and the laws it is compared with.

- **measured** ([`escape_law`][]): at every D, `runs` paths or seeds from their own random
  start at D; the escape time is the [`headflow.dynamics.measures.escape_crossing`][] of the
  model's `escape_observable` (for one student, its alignment `|R|/√(QT)` with the teacher),
  NaN when it does not happen by `t_max`. The initial overlap `R_0` of every run is kept: for
  an odd information exponent its sign decides whether the run escapes at once or first drifts
  back to 0.
- **scaled settings**: a law stated with a step size that shrinks with D (`η = c D^{−p}`) and
  an escape time that grows like `D^q` runs at every D with `lr·(D/D_0)^{−p}` and `t_max`, the
  SDE step and the save grid stretched by `(D/D_0)^q` ([`at_dim`][]; `D_0` the first D), so
  that every D is observed over the same rescaled window.
- **fits**: the slope of `t_esc` in `ln D` ([`headflow.validation.experiments.escape.fit_slope`][])
  or the exponent of `t_esc ∝ D^a` (least squares of `ln t_esc` on `ln D`, [`power_fit`][]),
  over the runs that escaped, with Student-t intervals.
- **predicted**: the growth rate `Λ = ∂(dR/dt)/∂R` at the equator `R = 0`, `Q = T = 1`, from
  the model's own drift ([`equator_rate`][]): a linear escape from `R_0 ~ D^{−1/2}` takes
  `ln D/(2Λ) + O(1)`.
- **verdicts** ([`headflow.validation.verdicts.interval_verdict`][]): a measured interval
  against a predicted value, within a stated tolerance.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from headflow.dynamics import Config, ConfigError
from headflow.dynamics.measures import ESCAPE_THRESHOLD, alignment
from headflow.dynamics.ode import build_field

from ._fit import linear_fit
from .compare import escapes_of
from .escape import bounded_sde, fit_slope, sgd_arrays

METHODS = ("sde", "weights", "overlaps")
"""What an escape law is measured on: SDE paths, or online SGD in weight space or as the exact
overlap chain."""

EQUATOR_STEP = 1e-4
"""The half-width of the centred difference of the drift at `R = 0` ([`equator_rate`][])."""


@dataclasses.dataclass
class EscapeLaw:
    """The escape times of one method at several D: `times (len(dims), runs)` (NaN: no escape
    by that D's `t_max`), the initial overlap `start (len(dims), runs)` of the first student
    with the first teacher, and per D the step size, `t_max` and the wall time (compilation
    included)."""

    method: str
    dims: list[int]
    times: np.ndarray
    start: np.ndarray
    lr: list[float]
    t_max: list[float]
    wall_s: list[float]

    def fit_slope(self) -> dict:
        """The slope of `t_esc` in `ln D` over the runs that escaped
        ([`headflow.validation.experiments.escape.fit_slope`][])."""
        return fit_slope(self.dims, self.times)

    def power_fit(self, *, sign: int = 0) -> dict:
        """The exponent of `t_esc ∝ D^a`
        ([`power_fit`][headflow.validation.experiments.index_laws.power_fit]); `sign = ±1`
        keeps only the runs whose initial overlap has that sign."""
        keep = np.ones_like(self.times, bool) if sign == 0 else np.sign(self.start) == sign
        return power_fit(self.dims, np.where(keep, self.times, np.nan))

    def censored(self) -> list[int]:
        """Per D, the runs that did not escape by `t_max`."""
        return [int(n) for n in np.isnan(self.times).sum(axis=1)]


def at_dim(cfg: Config, dim: int, ref: int, *, lr_power: float = 0.0,
           time_power: float = 0.0) -> Config:
    """`cfg` at dimension `dim`: `[training] lr` times `(dim/ref)^{−lr_power}`, `t_max` and
    `[sde] dt` times `(dim/ref)^{time_power}` (the save grid keeps its number of points)."""
    s = dim / ref
    return cfg.replace(**{"sim.dim": int(dim),
                          "training.lr": cfg.training.lr * s ** (-lr_power),
                          "training.t_max": cfg.training.t_max * s ** time_power,
                          "sde.dt": cfg.sde.dt * s ** time_power})


def escape_law(cfg: Config, dims, runs: int, *, method: str = "sde", lr_power: float = 0.0,
               time_power: float = 0.0, threshold: float = ESCAPE_THRESHOLD) -> EscapeLaw:
    """The escape time of `runs` SDE paths (`method = "sde"`) or SGD seeds (`"weights"`,
    `"overlaps"`) at every D of `dims`, each from its own random start at D, with the settings
    of [`at_dim`][] (the first D is the reference): the crossing of `threshold` by the model's
    `escape_observable`."""
    return escape_laws(cfg, dims, runs, [cfg.build_model().escape_observable], method=method,
                       lr_power=lr_power, time_power=time_power, threshold=threshold)[0]


def escape_laws(cfg: Config, dims, runs: int, observables: Sequence[Callable], *,
                method: str = "sde", lr_power: float = 0.0, time_power: float = 0.0,
                threshold: float = ESCAPE_THRESHOLD) -> list[EscapeLaw]:
    """[`escape_law`][] for several observables of the same runs (each a function of the named
    order parameters, as a model's `escape_observable`), one [`EscapeLaw`][] each: for
    example the alignment with each teacher direction ([`DirectionAlignment`][]), whose
    crossings are the steps of a staircase."""
    if method not in METHODS:
        raise ConfigError(f"escape_law: method {method!r}: choose one of {', '.join(METHODS)}")
    if int(runs) < 1 or not len(dims):
        raise ConfigError(f"escape_law: needs runs >= 1 and at least one D (got {runs}, {dims})")
    dims = [int(d) for d in dims]
    model = cfg.build_model()
    times = np.full((len(observables), len(dims), int(runs)), np.nan)
    start = np.full((len(dims), int(runs)), np.nan)
    lrs, t_maxes, walls = [], [], []
    for i, D in enumerate(dims):
        t0 = time.perf_counter()
        c = at_dim(cfg, D, dims[0], lr_power=lr_power, time_power=time_power)
        lrs.append(float(c.training.lr))
        t_maxes.append(float(c.training.t_max))
        if method == "sde":
            res = bounded_sde(c, D, int(runs))
            t, arrays = np.asarray(res.t), res.arrays()
        else:
            c = c.replace(**{"sim.space": method})
            t, arrays = sgd_arrays(c, D, list(range(c.sim.seed, c.sim.seed + int(runs))),
                                   c.save_times())
        for j, observable in enumerate(observables):
            esc = escapes_of(t, arrays, model.layout, threshold=threshold,
                             observable=observable)
            times[j, i] = [np.nan if e is None else e for e in esc]
        start[i] = np.asarray(arrays["R"])[:, 0].reshape(int(runs), -1)[:, 0]
        walls.append(time.perf_counter() - t0)
    return [EscapeLaw(method=method, dims=dims, times=x, start=start, lr=lrs, t_max=t_maxes,
                      wall_s=walls) for x in times]


@dataclasses.dataclass(frozen=True)
class DirectionAlignment:
    """The alignment of the student with teacher direction `m` (from 0): `max_i |R_im| /
    √(Q_ii T_mm)` over the student units ([`headflow.dynamics.measures.alignment`][]), from
    named order parameters with `R`, `Q` and `T` (numpy, leading batch axes kept)."""

    m: int

    def __call__(self, named: Mapping[str, Any]) -> Any:
        a = alignment(named["R"], named["Q"], named.get("T"))        # (..., students, M)
        return np.max(np.abs(np.asarray(a)[..., self.m]), axis=-1)


def power_fit(dims, times: np.ndarray, level: float = 0.95) -> dict:
    """The exponent `a` of `t_esc ∝ D^a`: ordinary least squares of `ln t_esc` on `ln D` over
    every finite entry of `times (len(dims), runs)`
    (the fit behind every slope the experiments report), with its Student-t interval."""
    x = np.repeat(np.log(np.asarray(dims, dtype=np.float64)), np.shape(times)[1])
    y = np.asarray(times, dtype=np.float64).ravel()
    ok = np.isfinite(y) & (y > 0)
    return linear_fit(x[ok], np.log(y[ok]), level)


def equator_rate(cfg: Config) -> float:
    """`Λ = ∂(dR/dt)/∂R` at `R = 0`, `Q = T = 1` (the model's other parameters at their start)
    for a model of one student and one teacher: the linear growth rate of the overlap at the
    equator, by a centred difference of half-width [`EQUATOR_STEP`][] of the model's own
    drift (`[ode]` backend, `[training]` step sizes, its `η²` terms included)."""
    model = cfg.build_model()
    if (model.n_students, model.n_teachers) != (1, 1):
        raise ConfigError("equator_rate: for one student and one teacher (got "
                          f"{model.n_students} and {model.n_teachers})")
    field = build_field(cfg, model)
    base = model.with_named(model.limit_state(), {"Q": [[1.0]], "T": [[1.0]]})
    rates = [float(model.named(field(0.0, model.with_named(base, {"R": [[h]]})))["R"][0, 0])
             for h in (EQUATOR_STEP, -EQUATOR_STEP)]
    return (rates[0] - rates[1]) / (2 * EQUATOR_STEP)


__all__ = ["METHODS", "DirectionAlignment", "EscapeLaw", "at_dim", "equator_rate", "escape_law",
           "escape_laws", "power_fit"]
