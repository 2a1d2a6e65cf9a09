"""Designing a learning-rate schedule on the ODE and checking it in SGD (`headflow schedule`,
`docs/differentiable.md`)."""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from scipy.optimize import minimize_scalar

from headflow.dynamics import Config, HeadflowError, Schedule, check_stop
from headflow.dynamics.ode import curve_from_config, final_risk
from headflow.sims import run_sgd


@dataclasses.dataclass(frozen=True)
class ScheduleDesign:
    """What [`design_schedule`][] found and measured.

    `lr_constant`: the best constant η on the ODE; `schedule`: the optimized η(t); `t`: the
    save grid; `ode_constant`, `ode_schedule`: ODE risk curves (T) at the config's nodes;
    `sgd_constant`, `sgd_schedule`: SGD risk curves (S, T); `history`: the ODE risk at T (design
    nodes) after each optimizer step; `search`: `(η, risk at T)` of the constant search."""

    lr_constant: float
    schedule: Schedule
    t: np.ndarray
    ode_constant: np.ndarray
    ode_schedule: np.ndarray
    sgd_constant: np.ndarray
    sgd_schedule: np.ndarray
    history: np.ndarray
    search: np.ndarray
    dim: int
    seeds: int

    def summary(self) -> dict:
        """The numbers of `schedule.json` (SGD: seed mean at T and its standard error)."""
        def mean_sem(r: np.ndarray) -> tuple[float, float]:
            final = r[:, -1]
            sem = float(final.std(ddof=1) / math.sqrt(len(final))) if len(final) > 1 else math.nan
            return float(final.mean()), sem

        c, c_sem = mean_sem(self.sgd_constant)
        s, s_sem = mean_sem(self.sgd_schedule)
        diff = c - s
        combined = math.hypot(c_sem, s_sem)
        return {"lr_constant": self.lr_constant,
                "risk_constant_ode": float(self.ode_constant[-1]),
                "risk_schedule_ode": float(self.ode_schedule[-1]),
                "sgd_risk_constant": c, "sgd_risk_constant_sem": c_sem,
                "sgd_risk_schedule": s, "sgd_risk_schedule_sem": s_sem,
                "sgd_improvement": diff,
                "sgd_improvement_in_sem": diff / combined if combined > 0 else math.nan,
                "schedule": self.schedule.to_table(), "dim": self.dim, "seeds": self.seeds,
                "optimizer_steps": int(len(self.history))}


def _with(cfg: Config, **keys) -> Config:
    return cfg.replace(**keys)


@eqx.filter_jit
def _risk_of(curve, params):
    """The ODE risk at the curve's last time for `params` (one program per curve structure,
    shared by every design in the process)."""
    return final_risk(curve(params))


@eqx.filter_jit
def _loss_and_grad(curve, u):
    """The final risk of the schedule curve at log step sizes `u` and its gradient in `u`
    (forward mode)."""
    def risk(u):
        r = final_risk(curve({"training.lr_schedule": jnp.exp(u)}))
        return r, r                       # the risk, and the risk again as the aux output
    grad, loss = jax.jacfwd(risk, has_aux=True)(u)
    return loss, grad


def design_schedule(cfg: Config, *, budget: float, knots: int = 6, dim: int = 2000,
                    seeds: int = 8, steps: int = 40, design_samples: int | None = 2048,
                    learning_rate: float = 0.1, lr_range: tuple[float, float] | None = None,
                    progress: bool = False,
                    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr)
                    ) -> ScheduleDesign:
    """Find the best constant η and an optimized schedule η(t) for the risk at `t = budget` on
    the ODE, then run both in SGD.

    1. The best constant η: a bounded 1-D search (Brent, scipy's `minimize_scalar`) of the
       ODE's risk at `budget` over `log η` in `lr_range` (default: `[lr/100, 4·lr]` around the
       config's `training.lr`; a diverging η counts as a large risk).
    2. The schedule: `knots` log-spaced times from `budget/100` to `budget`, η piecewise linear
       in `log t` (constant before the first knot), started flat at the best constant and
       optimized with Adam (optax, `learning_rate` on `log η`, `steps` steps) on the gradient
       of the ODE's risk at `budget` through the solve; the best iterate is kept.
    3. Both ODE curves again with the config's `[ode]` nodes (the design uses
       `design_samples` nodes, None: the config's), and both step-size choices in SGD at `dim`
       over `seeds` seeds (`[sim]` space and dtype as configured).
    """
    if knots < 2:
        raise HeadflowError(f"--knots {knots}: need at least 2 knots")
    base = _with(cfg, **{"training.t_max": float(budget)})
    if base.training.lr_schedule is not None:
        raise HeadflowError("the config already sets training.lr_schedule; headflow schedule "
                            "designs it (remove it from the config)")
    design = base if design_samples is None else _with(base, **{"ode.samples": design_samples})
    lr0 = float(cfg.training.lr) if cfg.training.lr > 0 else 1.0
    lo, hi = lr_range if lr_range is not None else (lr0 / 100.0, 4.0 * lr0)

    # -- 1. best constant η ---------------------------------------------------------------------
    curve = curve_from_config(design)
    search: list[tuple[float, float]] = []
    penalty: list[float] = []

    def objective(log_lr: float) -> float:
        check_stop()
        lr = math.exp(log_lr)
        r = float(_risk_of(curve, {"training.lr": jnp.asarray(lr)}))
        search.append((lr, r))
        log(f"  constant η = {lr:.5g}: ODE risk at T = {r:.6g}")
        if not math.isfinite(r):
            penalty.append(lr)
            finite = [v for _, v in search if math.isfinite(v)]
            return 10.0 * max(finite) if finite else 1e6
        return r

    res = minimize_scalar(objective, bounds=(math.log(lo), math.log(hi)), method="bounded",
                          options={"xatol": 0.01, "maxiter": 30})
    finite = [(lr, r) for lr, r in search if math.isfinite(r)]
    if not finite:
        raise HeadflowError(f"every constant η tried in [{lo:g}, {hi:g}] diverged on the ODE")
    lr_best = min(finite, key=lambda x: x[1])[0]
    del res

    # -- 2. the schedule ------------------------------------------------------------------------
    times = tuple(float(f"{t:.12g}") for t in np.geomspace(budget / 100.0, budget, knots))
    table = {"kind": "log", "times": list(times), "values": [lr_best] * knots}
    sched_cfg = _with(design, **{"training.lr_schedule": table})
    # forward mode: `knots` tangents through one solve compile and run faster than reverse
    # mode through the checkpointed solve, for the few knots a schedule has
    scurve = curve_from_config(sched_cfg, adjoint="forward")

    opt = optax.adam(learning_rate)
    u = jnp.full(knots, math.log(lr_best), dtype=jnp.float64)
    state = opt.init(u)
    best_u, best = u, math.inf
    history = []
    scale = 1.0
    for i in range(steps):
        check_stop()
        value, grad = _loss_and_grad(scurve, u)
        value = float(value)
        if not (math.isfinite(value) and bool(jnp.all(jnp.isfinite(grad)))):
            # a diverging schedule: back to the best one with smaller steps
            scale *= 0.5
            u, state = best_u, opt.init(best_u)
            log(f"  step {i}: not finite, step size halved")
            continue
        history.append(value)
        if value < best:
            best, best_u = value, u
        log(f"  step {i}: ODE risk at T = {value:.6g}  η(knots) = "
            f"{np.array2string(np.exp(np.asarray(u)), precision=3)}")
        updates, state = opt.update(grad, state, u)
        u = u + scale * updates
    schedule = Schedule(values=np.exp(np.asarray(best_u)), times=times, kind="log")

    # -- 3. both at the config's nodes, and in SGD -----------------------------------------------
    const_cfg = _with(base, **{"training.lr": lr_best})
    final_sched_cfg = _with(base, **{"training.lr_schedule": schedule.to_table()})
    ode_c = np.asarray(curve_from_config(const_cfg)({}))
    ode_s = np.asarray(curve_from_config(final_sched_cfg)({}))
    log(f"ODE risk at T = {budget:g}: constant η = {lr_best:.4g}: {ode_c[-1]:.6g}; "
        f"schedule: {ode_s[-1]:.6g}")
    sgd_c = run_sgd(const_cfg, dim=dim, seeds=seeds, progress=progress)
    sgd_s = run_sgd(final_sched_cfg, dim=dim, seeds=seeds, progress=progress)
    return ScheduleDesign(lr_constant=lr_best, schedule=schedule, t=np.asarray(base.save_times()),
                          ode_constant=ode_c, ode_schedule=ode_s,
                          sgd_constant=np.asarray(sgd_c.risk), sgd_schedule=np.asarray(sgd_s.risk),
                          history=np.asarray(history), search=np.asarray(search), dim=dim,
                          seeds=seeds)
