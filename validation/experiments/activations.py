"""Activations compared at long times (`docs/activations.md`): error floors, Bayes-optimality, the
cost of SGD noise, and the number of heads.

Every "final risk" here is the risk of a long-time state of the order-parameter ODE, reached by
integration from a small random start and checked for stationarity
([`headflow.dynamics.analysis.find_fixed_point`][]), evaluated on a larger node set than the one
that drove the ODE. Definitions and decisions: `docs/activations.md`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import numpy as np
from headflow.dynamics import Config, Overlaps, bayes_risk, population_risk
from headflow.dynamics.analysis import (
                                        STATIONARY_Z,
                                        Chunks,
                                        FixedPoint,
                                        NewtonPolish,
                                        StationarityTest,
                                        find_fixed_point,
                                        )
from headflow.dynamics.expectations import AbstractExpectation, get_expectation
from headflow.dynamics.models.attention import trajectory_risk
from headflow.dynamics.ode import (
                                   Integrator,
                                   NodeChange,
                                   backend_of,
                                   build_field,
                                   initial_state,
                                   node_change,
                                   node_count,
                                   run_ode,
                                   segment_start,
                                   traced_values,
                                   )
from headflow.sims import run_sgd

from ._constants import BAYES_TOLERANCE as BAYES_TOLERANCE  # light: shown by `--help`
from .convergence import Claim, below, within

MODES = ("gradient_flow", "sgd_noise")


@dataclasses.dataclass
class LongTimeRun:
    """One long-time ODE state and what was measured on it.

    `risk`, `risk_err`: the population risk of the final state on the evaluation nodes;
    `ts`, `risk_t`: the risk along the trajectory (on the ODE's own nodes); `fixed_point`: the
    state, its stationarity check and the trajectory."""

    activation: str
    amplitude: float
    H: int
    lr: float
    mode: str
    fixed_point: FixedPoint
    risk: float
    risk_err: float
    ts: np.ndarray
    risk_t: np.ndarray
    risk_t_err: np.ndarray
    node_checks: dict[str, NodeChange] = dataclasses.field(default_factory=dict)
    """The final segment rerun on 4× the nodes: `"risk"` (the final risk) and `"state"` (the
    order parameters); empty without the check."""
    fine: FixedPoint | None = None
    """The rerun's fixed point (on 4× the nodes), for checks of other quantities of the state."""

    @property
    def risk_check(self) -> NodeChange | None:
        """The node check of the final risk (None: not made)."""
        return self.node_checks.get("risk")

    @property
    def overlaps(self) -> Overlaps:
        return self.fixed_point.overlaps

    def summary(self) -> dict:
        fp = self.fixed_point
        ov = fp.overlaps
        return {"activation": self.activation, "amplitude": self.amplitude, "H": self.H,
                "lr": self.lr, "mode": self.mode, "risk": self.risk, "risk_err": self.risk_err,
                "t": fp.t, "stationary": fp.stationary, "solver_steps": fp.num_steps,
                "polished_at": list(fp.polished_at), "max_growth": fp.max_growth,
                "polish_attempts": [list(a) for a in fp.polish_attempts],
                "risk_drift_last_chunk": self.risk_drift(),
                "stationarity": fp.check.summary(),
                "node_checks": {k: c.summary() for k, c in self.node_checks.items()},
                "state": {k: np.asarray(getattr(ov, k)).tolist()
                          for k in ("m", "q", "n", "s", "b")}}

    def risk_drift(self) -> float:
        """Risk change over the last integration chunk (from t/2 to t): a convergence check
        that also sees slow creeping."""
        t, r = self.ts, self.risk_t
        half = np.searchsorted(t, 0.5 * t[-1])
        return float(r[-1] - r[min(half, len(r) - 1)])


def mode_config(cfg: Config, mode: str) -> Config:
    """`cfg` with the η² terms on (`"sgd_noise"`) or off (`"gradient_flow"`)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {MODES}")
    return cfg.replace(**{"ode.sgd_noise": mode == "sgd_noise"})


def long_time(cfg: Config, *, t_max: float, t_first: float | None = None,
              ov0: Overlaps | None = None, eval_backend: AbstractExpectation | None = None,
              z: float = STATIONARY_Z, polish: bool = True, polish_after: float = 100.0,
              progress: Callable | None = None, node_check: bool = True) -> LongTimeRun:
    """Integrate the configured ODE (manifold form) from `ov0` (default: `[ode] init`, a small
    random start at `sim.dim`) until stationary or `t_max`, and measure the final risk.

    **Arguments:** `cfg` (its `[ode] sgd_noise` decides the mode), `t_max`, `t_first` (first
    chunk, see [`find_fixed_point`][]), `ov0`, `eval_backend` (nodes for the final risk; default
    the ODE's own), `z` the stationarity tolerance, `polish`/`polish_after` the Newton
    acceleration of [`find_fixed_point`][] (manifold form only), `progress(t, check)`,
    `node_check`: rerun the final segment (from the state saved at half the time reached, see
    [`headflow.dynamics.ode.segment_start`][]) on 4× the nodes, with the same fixed-point search,
    and record the change of the final risk and of the state
    ([`headflow.dynamics.ode.node_change`][]).

    **Returns:** a [`LongTimeRun`][].
    """
    model = cfg.build_model()
    manifold = cfg.ode.form == "manifold"
    ov0 = initial_state(cfg, model) if ov0 is None else ov0
    if manifold:
        ov0 = ov0.on_manifold()
    search: dict[str, Any] = dict(z=float(z), polish=polish and manifold,
                                  polish_after=float(polish_after))
    t_first = None if t_first is None else float(t_first)
    backend = backend_of(cfg)
    fp = _fixed_point(cfg, model, backend, ov0, Chunks(t_max=float(t_max), t_first=t_first),
                      progress=progress, **search)
    risk_t, risk_t_err = trajectory_risk(model, fp.trajectory, backend, manifold=manifold)
    r, e = _final_risk(model, fp.overlaps, backend if eval_backend is None else eval_backend,
                       manifold)
    checks: dict = {}
    finer: list[FixedPoint] = []
    if node_check and node_count(cfg) is not None:
        def rerun(c: Config, start: Overlaps, t0: float, t1: float) -> float:
            b = backend_of(c)
            f = _fixed_point(c, model, b, start, Chunks(t_max=t1, t0=t0), **search)
            finer.append(f)
            return _final_risk(model, f.overlaps, b if eval_backend is None else eval_backend,
                               manifold)[0]

        t_from, start = segment_start(fp.ts, fp.trajectory)
        if manifold:        # a saved state may overshoot the PSD cone by round-off
            start = start.nearest_valid(cfg.model.rho)
        if fp.t > t_from:
            risk_check = node_change(rerun, cfg, start, t_from, fp.t, float(r),
                                     quantity="final risk")
            checks = {"risk": risk_check, "state": dataclasses.replace(
                risk_check, quantity="fixed point (order parameters)",
                value=_state_vector(fp.overlaps), value_fine=_state_vector(finer[0].overlaps))}
    return LongTimeRun(activation=cfg.model.activation, amplitude=float(cfg.prior.amplitude),
                       H=cfg.model.H, lr=float(cfg.training.lr),
                       mode="sgd_noise" if cfg.ode.sgd_noise else "gradient_flow",
                       fixed_point=fp, risk=float(r), risk_err=float(e),
                       ts=np.asarray(fp.ts), risk_t=np.asarray(risk_t),
                       risk_t_err=np.asarray(risk_t_err), node_checks=checks,
                       fine=finer[0] if finer else None)


def _fixed_point(cfg: Config, model, backend: AbstractExpectation, ov0: Overlaps,
                 chunks: Chunks, *, z: float, polish: bool, polish_after: float,
                 progress: Callable | None = None) -> FixedPoint:
    """[`find_fixed_point`][] of `cfg`'s field on `backend`'s nodes (the polish allowed from
    `polish_after` in absolute time)."""
    field = build_field(cfg, model, backend)
    after = max(0.0, polish_after - float(chunks.t0))
    return find_fixed_point(field, ov0, chunks, Integrator.from_config(cfg.ode),
                            test=StationarityTest(z=z),
                            polish=NewtonPolish(after=after) if polish else None,
                            progress=progress)


def _final_risk(model, ov: Overlaps, backend: AbstractExpectation, manifold: bool
                ) -> tuple[float, float]:
    r, e = _risk_program(traced_values(model), ov, backend, manifold)
    return float(r), float(e)


@eqx.filter_jit
def _risk_program(model, ov: Overlaps, backend: AbstractExpectation, manifold: bool):
    # one program for every model value, prior and state of the same shapes
    return population_risk(model, ov, backend, manifold=manifold)


def _state_vector(ov: Overlaps) -> np.ndarray:
    """The manifold order parameters `m, q, n, s, b` of a state, flattened."""
    return np.concatenate([np.ravel(np.asarray(getattr(ov, k))) for k in ("m", "q", "n", "s",
                                                                          "b")])


def bayes_risks(cfg: Config, amplitudes: Sequence[float], samples: int
                ) -> tuple[list[float], list[float]]:
    """`R_Bayes` (QMC, `samples` nodes) and its error at each amplitude."""
    backend = get_expectation("qmc", samples, seed=cfg.ode.seed)
    out, err = [], []
    for a in amplitudes:
        r, e = bayes_risk(cfg.replace(**{"prior.amplitude": a}).build_model(), backend)
        out.append(float(r))
        err.append(float(e))
    return out, err


def _fine(run: LongTimeRun) -> float:
    c = run.risk_check
    return float("nan") if c is None else float(c.value_fine)


def _checks(*runs: LongTimeRun) -> list[NodeChange]:
    return [r.risk_check for r in runs if r.risk_check is not None]


def bayes_verdict(run: LongTimeRun, bayes: float, bayes_err: float,
                  tol: float = BAYES_TOLERANCE) -> Claim:
    """"Bayes-softmax reaches R_Bayes": the long-time risk within `tol·R_Bayes` of `R_Bayes`,
    with the run's node check and the sampling errors of both risks."""
    return within(f"{run.activation} within {100 * tol:g}% of R_Bayes at a = {run.amplitude:g}",
                  run.risk, _fine(run), bayes, tol * bayes, _checks(run),
                  error=float(np.hypot(run.risk_err, bayes_err)),
                  numbers={"risk": run.risk, "risk_fine": _fine(run), "bayes_risk": bayes,
                           "relative_gap": (run.risk - bayes) / bayes,
                           "relative_gap_fine": (_fine(run) - bayes) / bayes})


def below_verdict(lower: LongTimeRun, upper: LongTimeRun) -> Claim:
    """"`lower`'s activation ends below `upper`'s" (e.g. softmax-1 below softmax), with both
    runs' node checks."""
    return below(f"{lower.activation} below {upper.activation} at a = {lower.amplitude:g}",
                 lower.risk, upper.risk, _fine(lower), _fine(upper), _checks(lower, upper),
                 error=float(np.hypot(lower.risk_err, upper.risk_err)),
                 numbers={"risk": [lower.risk, upper.risk],
                          "risk_fine": [_fine(lower), _fine(upper)],
                          "relative_cut": (upper.risk - lower.risk) / upper.risk})


def activation_verdicts(runs: dict[str, list[LongTimeRun]], bayes: Sequence[float],
                        bayes_err: Sequence[float], support: int | None) -> list[Claim]:
    """The claims of `headflow activations` at each amplitude of a sweep: Bayes-softmax within
    `BAYES_TOLERANCE` of R_Bayes (when `H = support`), and softmax-1 below softmax; each with
    its node-convergence check ([`headflow.validation.experiments.convergence`][])."""
    out = []
    for i, (rb, rbe) in enumerate(zip(bayes, bayes_err)):
        bs = runs.get("bayes_softmax")
        if bs is not None and support is not None and bs[i].H == support:
            out.append(bayes_verdict(bs[i], rb, rbe))
        if "softmax1" in runs and "softmax" in runs:
            out.append(below_verdict(runs["softmax1"][i], runs["softmax"][i]))
    return out


def amplitude_sweep(cfg: Config, amplitudes: Sequence[float], activations: Sequence[str], *,
                    mode: str, t_max: float, t_first: float | None = None,
                    eval_backend: AbstractExpectation | None = None,
                    on_run: Callable[[LongTimeRun], None] | None = None
                    ) -> dict[str, list[LongTimeRun]]:
    """Long-time runs for every activation and amplitude (`prior.amplitude`: the spike
    amplitude √ν, or a factor on discrete points / Gaussian mean and standard deviations)."""
    base = mode_config(cfg, mode)
    runs: dict[str, list[LongTimeRun]] = {a: [] for a in activations}
    for act in activations:
        for amp in amplitudes:
            c = base.replace(**{"model.activation": act, "prior.amplitude": float(amp)})
            run = long_time(c, t_max=t_max, t_first=t_first, eval_backend=eval_backend)
            runs[act].append(run)
            if on_run is not None:
                on_run(run)
    return runs


@dataclasses.dataclass
class SGDPoint:
    """Online SGD at finite D from the same kind of random start, measured at `t`: the seed
    mean of the risk averaged over the last `tail` fraction of the save grid."""

    activation: str
    amplitude: float
    lr: float
    dim: int
    seeds: int
    t: float
    risk: float
    risk_sem: float
    risk_final: list[float]
    start: str

    def summary(self) -> dict:
        return dataclasses.asdict(self)


def sgd_point(cfg: Config, *, dim: int, seeds: int, t: float, tail: float = 0.25,
              n_save: int = 41, start: Overlaps | None = None
              ) -> SGDPoint:
    """Run SGD (`[training]`, `[model]`, `[prior]` of `cfg`) at dimension `dim` over `seeds`
    to time `t`; the risk is averaged over the last `tail` of the run and then over seeds.

    `start`: overlaps to build the initial weights from
    ([`headflow.dynamics.weights_from_overlaps`][], e.g. a gradient-flow fixed point, to measure
    the stationary SGD risk without waiting for the escape); default the random initialization of
    `[training]`."""
    times = np.linspace(0.0, t, n_save)
    res = run_sgd(cfg, dim=dim, seeds=seeds, times=times, start=start)
    risk = np.asarray(res.risk)                          # (S, T)
    k = max(1, int(round(tail * (len(times) - 1))))
    per_seed = risk[:, -k:].mean(axis=1)
    sem = float(per_seed.std(ddof=1) / np.sqrt(seeds)) if seeds > 1 else float("nan")
    return SGDPoint(activation=cfg.model.activation, amplitude=float(cfg.prior.amplitude),
                    lr=float(cfg.training.lr), dim=dim, seeds=seeds, t=float(t),
                    risk=float(per_seed.mean()), risk_sem=sem,
                    risk_final=[float(x) for x in risk[:, -1]],
                    start="random" if start is None else "fixed_point")


def ode_tail_risk(cfg: Config, *, t: float, tail: float = 0.25, n_save: int = 41,
                  eval_backend: AbstractExpectation | None = None) -> float:
    """The ODE of `cfg` (its own mode) from `[ode] init` to time `t`, its risk averaged over
    the last `tail` of the same save grid as [`sgd_point`][] (the theory for an SGD point)."""

    times = np.linspace(0.0, t, n_save)
    res = run_ode(cfg, times=times)
    k = max(1, int(round(tail * (len(times) - 1))))
    return float(np.mean(np.asarray(res.risk)[-k:]))


def with_lr(cfg: Config, eta: float) -> Config:
    """`cfg` at learning rate `η`, with `η_b` scaled by the same factor, so that every run
    follows the same gradient flow in `τ = ηt` and differs only by the SGD noise."""
    tr = cfg.training
    return cfg.replace(**{"training.lr": float(eta),
                          "training.lr_bias": float(tr.lr_bias * eta / tr.lr)})


@dataclasses.dataclass
class EtaPoint:
    """The stationary risk at learning rate η (ODE with the η² terms), started from the
    gradient-flow fixed point; optional SGD at finite D."""

    eta: float
    run: LongTimeRun
    sgd: SGDPoint | None = None


def noise_excess(cfg: Config, etas: Sequence[float], gradient_flow: LongTimeRun, *,
                 tau_max: float, eval_backend: AbstractExpectation | None = None,
                 sgd_etas: Sequence[float] = (), sgd_dim: int = 2000, sgd_seeds: int = 4,
                 sgd_tau: float = 100.0, on_run: Callable | None = None) -> list[EtaPoint]:
    """Stationary risk with SGD noise versus η: for each η, the ODE with its η² terms started
    from the gradient-flow fixed point and integrated to stationarity (up to `τ = ηt =
    tau_max`), and for η in `sgd_etas` online SGD at `sgd_dim` started from weights with the
    gradient-flow fixed point's overlaps and run to `τ = sgd_tau`."""
    out = []
    start = gradient_flow.overlaps.nearest_valid(cfg.model.rho)
    for eta in etas:
        c = mode_config(with_lr(cfg, eta), "sgd_noise")
        run = long_time(c, t_max=tau_max / eta, t_first=min(10.0, tau_max / 64) / eta,
                        ov0=start, eval_backend=eval_backend)
        point = EtaPoint(eta=float(eta), run=run)
        if any(abs(eta - e) < 1e-12 for e in sgd_etas):
            point.sgd = sgd_point(c, dim=sgd_dim, seeds=sgd_seeds, t=sgd_tau / eta,
                                  start=start)
        out.append(point)
        if on_run is not None:
            on_run(point)
    return out


def power_law_slope(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Least-squares slope of `log y` against `log x` (positive y only)."""
    xs, ys = np.asarray(x, float), np.asarray(y, float)
    ok = (xs > 0) & (ys > 0)
    if ok.sum() < 2:
        return None
    return float(np.polyfit(np.log(xs[ok]), np.log(ys[ok]), 1)[0])


def heads_sweep(cfg: Config, heads: Sequence[int], activations: Sequence[str], *, mode: str,
                t_max: float, t_first: float | None = None,
                eval_backend: AbstractExpectation | None = None,
                reuse: dict[tuple[str, int], LongTimeRun] | None = None,
                on_run: Callable | None = None) -> dict[str, list[LongTimeRun]]:
    """Long-time runs at each head count H for every activation (at the config's amplitude);
    `reuse[(activation, H)]`: runs of the same configuration already done."""
    base = mode_config(cfg, mode)
    runs: dict[str, list[LongTimeRun]] = {a: [] for a in activations}
    for act in activations:
        for H in heads:
            if reuse is not None and (act, int(H)) in reuse:
                runs[act].append(reuse[(act, int(H))])
                continue
            c = base.replace(**{"model.activation": act, "model.H": int(H)})
            run = long_time(c, t_max=t_max, t_first=t_first, eval_backend=eval_backend)
            runs[act].append(run)
            if on_run is not None:
                on_run(run)
    return runs


def support_size(cfg: Config) -> int | None:
    """S = |supp P_θ| for discrete priors (points of zero weight excluded), else None."""
    prior = cfg.build_prior()
    w = getattr(prior, "weights", None)
    if w is None or getattr(prior, "points", None) is None:
        return None
    return int(np.sum(np.asarray(w) > 0))
