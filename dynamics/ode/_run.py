"""Integrating the ODEs of a configuration: the `headflow ode` engine, the same for every model
(what is model-specific comes from the model's methods: `vector_field`, `ode_start`,
`ode_state`, `state_risk`, `ode_info`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._errors import HeadflowError
from .._exported import call_exported
from .._steps import StepSizes
from ..config import Config
from ..expectations import AUTO_MAX_SAMPLES, AbstractExpectation
from ..fields import MAX_GROUP, AbstractField
from ._backend import AUTO_FALLBACK as AUTO_FALLBACK
from ._backend import backend_of as backend_of
from ._convergence import NODE_FACTOR, _as_array, node_change
from ._integrate import Integrator, integrate, traced_values
from ._models import as_float64, model_arrays


class ODEResult(eqx.Module):
    """An integrated trajectory: `t` (T), `overlaps` (leaves `(T, ...)`), the population risk
    `risk` (T) with its error estimate `risk_err` (T), and solver statistics."""

    t: Float[Array, " T"]
    overlaps: Any
    risk: Float[Array, " T"]
    risk_err: Float[Array, " T"]
    num_steps: int = eqx.field(static=True, default=0)
    num_rejected: int = eqx.field(static=True, default=0)
    compile_s: float = eqx.field(static=True, default=float("nan"))
    run_s: float = eqx.field(static=True, default=float("nan"))
    accuracy: dict = eqx.field(static=True, default_factory=dict)
    model: Any = None
    """The model (its `named` view gives the arrays)."""
    part_s: dict = eqx.field(static=True, default_factory=dict)
    """Wall seconds of the parts around the solve: `build`, `risk` and `field_error` (see
    [`phases`][])."""

    @property
    def phases(self) -> dict[str, float]:
        """Wall seconds of the run's parts: `build` (the model, the start and the nodes, with
        the pilot runs of `samples = "auto"`), `compile` (tracing and compiling the solve, or
        loading it: `compile_s`), `integrate` (the compiled solve running: `run_s`), `risk`
        (along the saved states) and `field_error` (the field's error estimate at a few saved
        states)."""
        p = self.part_s
        return {**({"build": p["build"]} if "build" in p else {}),
                "compile": self.compile_s, "integrate": self.run_s,
                **{k: v for k, v in p.items() if k != "build"}}

    def arrays(self) -> dict[str, np.ndarray]:
        """The `ode.npz` arrays (see the README)."""
        named = model_arrays(self.model, self.overlaps)
        return {"t": np.asarray(self.t), "risk": np.asarray(self.risk),
                "risk_err": np.asarray(self.risk_err), **named}


AUTO_PILOT = 2048
"""Nodes of the pilot run that sizes `[ode] samples = "auto"`."""



QUANTITY_REPLICATES = 5
"""Pilot runs on independent node sets whose spread is the error of the reported quantity for
`[ode] quantity_target` (see [`sized`][]); five cost about what one pilot run and its rerun on
`NODE_FACTOR` times the nodes cost."""

CONVERGENCE_RATE = {"mc": 0.5, "qmc": 0.7}
"""Error `∝ n^{-rate}` assumed when sizing `samples = "auto"` (see [`sized`][])."""


def ode_backend(cfg: Config) -> AbstractExpectation | None:
    """The nodes of the ODE's expectations: [`backend_of`][], or None where `[ode] expectation
    = "exact"` (closed forms, no nodes)."""
    return None if cfg.ode.expectation == "exact" else backend_of(cfg)


def error_target(cfg: Config) -> float:
    """The largest relative error of the vector field that `samples = "auto"` aims for:
    `[ode] error_target`, by default `10⁴ · rtol` (0.01 at the default tolerance)."""
    o = cfg.ode
    return float(o.error_target) if o.error_target is not None else 1e4 * o.rtol


@eqx.filter_jit
def _sizes_and_errors(field: AbstractField, ovs: Any) -> tuple[Array, Array]:
    def one(ov):
        rhs, err = field.with_error(ov)
        r = jnp.concatenate([jnp.ravel(x) for x in jax.tree.leaves(rhs)])
        e = jnp.concatenate([jnp.ravel(x) for x in jax.tree.leaves(err)])
        return jnp.max(jnp.abs(r)), jnp.max(e)

    return jax.lax.map(one, ovs)


def relative_error(field: AbstractField, ovs: Any) -> np.ndarray:
    """The error of the vector field at each state of `ovs` (leaves `(k, ...)`), by the nodes'
    own rule, relative to the field's largest size over those states:
    `max_i err_i(state) / max_states max_i |RHS_i|`. (Relative to the field at the same state
    it would diverge at every stationary point, where the field vanishes.)"""
    size, err = (np.asarray(x)
                 for x in call_exported(_sizes_and_errors, traced_values(field), ovs))
    return err / max(float(np.max(size)), 1e-300)


def sized(cfg: Config, model: Any, ov0: Any, times,
          quantity: Callable[[ODEResult], Any] | None = None, *,
          pilot: int = AUTO_PILOT) -> tuple[Config, dict]:
    """`cfg` with `[ode] samples = "auto"` resolved, and what was measured to size it.

    A pilot run with `pilot` nodes (default `AUTO_PILOT`) integrates the same ODE over the same
    span (9 saved states) and measures the error of its field along the way
    ([`relative_error`][]); the count is then scaled by the convergence rate of the backend,
    `n^{-1/2}` for Monte Carlo and `n^{-0.7}` for QMC (an assumed rate: the pilot's measured
    error is what the count rests on), to meet [`error_target`][].

    With `[ode] quantity_target` set, the count also meets that target on the quantity the
    command reports, `quantity(result)` of the solved run (default: the final risk). On the
    random node sets (`mc`, `qmc`) the pilot's error of the quantity is measured directly: the
    standard deviation of the quantity over `QUANTITY_REPLICATES` pilot runs on independent
    node sets (seeds `seed`, `seed + 1`, …, [`replicate_spread`][]), scaled to the target like
    the field's. On the deterministic `quadrature` and `sparse` nodes the pilot run and its rerun on
    `NODE_FACTOR` times the nodes give the change `δ`, and the pilot's error is taken as
    `δ/(1 − NODE_FACTOR^{-1/2})`. The larger count wins, rounded up to a power of two, at most
    `AUTO_MAX_SAMPLES`. An explicit `samples` is returned unchanged.
    """
    if cfg.ode.samples != "auto" or cfg.ode.expectation == "exact":
        return cfg, {}
    target = error_target(cfg)
    pilot_cfg = cfg.replace(**{"ode.samples": int(pilot)})
    field = build_field(pilot_cfg, model)
    states = jax.tree.map(lambda x: x[None], ov0)
    try:
        sol = integrate(field, ov0, np.linspace(times[0], times[-1], 9),
                        Integrator.from_config(cfg.ode))
        states = sol.overlaps
    except HeadflowError:           # the real run reports it; size from the start alone
        pass
    eps = float(np.max(relative_error(field, states)))
    rate = CONVERGENCE_RATE.get(cfg.ode.expectation, 0.5)
    want = _scaled(pilot, eps, target, rate)
    info: dict = {"target": target, "pilot_samples": int(pilot), "pilot_error": eps}
    if cfg.ode.quantity_target is not None:
        q_target = float(cfg.ode.quantity_target)
        of = final_risk_of if quantity is None else quantity

        def run(c: Config) -> Any:
            return of(solve_problem(_problem(c, model, ov0, np.asarray(times), {})))

        try:
            if cfg.ode.expectation in CONVERGENCE_RATE:      # random nodes: replicates
                q_err = replicate_spread([run(pilot_cfg.replace(**{"ode.seed": cfg.ode.seed + r}))
                                          for r in range(QUANTITY_REPLICATES)])
                info.update(pilot_quantity_replicates=QUANTITY_REPLICATES)
            else:
                ch = node_change(lambda c, s, t0, t1: run(c), pilot_cfg, ov0, times[0],
                                 times[-1], run(pilot_cfg), quantity="reported quantity")
                q_err = ch.change / (1.0 - NODE_FACTOR ** (-rate))
                info.update(pilot_quantity_change=ch.change)
        except HeadflowError:
            q_err = float("inf")
        want = max(want, _scaled(pilot, q_err, q_target, rate))
        info.update(quantity_target=q_target, pilot_quantity_error=q_err)
    n = int(min(max(2 ** int(np.ceil(np.log2(max(want, 1.0)))), int(pilot)), AUTO_MAX_SAMPLES))
    return cfg.replace(**{"ode.samples": n}), {**info, "samples": n}


def replicate_spread(values: list[Any]) -> float:
    """The error of one run's reported quantity (a number or an array) from its values on
    independent node sets: the standard deviation over the replicates (`ddof = 1`), the largest
    over the quantity's entries; inf where an entry is missing or not finite."""
    arrs = [_as_array(v) for v in values]
    if len(arrs) < 2 or any(a.shape != arrs[0].shape for a in arrs):
        return float("inf")
    stacked = np.stack(arrs)
    if stacked[0].size == 0:
        return 0.0
    if not np.all(np.isfinite(stacked)):
        return float("inf")
    return float(np.max(np.std(stacked, axis=0, ddof=1)))


def _scaled(pilot: int, err: float, target: float, rate: float) -> float:
    """Nodes at which an error `err` at `pilot` nodes falls to `target` as `n^{-rate}`."""
    if not np.isfinite(err):
        return float(AUTO_MAX_SAMPLES)
    return pilot * (err / target) ** (1.0 / rate)


def final_risk_of(result: ODEResult) -> float:
    """The final risk of a solved run: what `headflow ode` reports."""
    return float(np.asarray(result.risk)[-1])


def build_field(cfg: Config, model: Any = None, backend: AbstractExpectation | None = None,
                *, sgd_noise: bool | None = None, max_group: int = MAX_GROUP) -> AbstractField:
    """The model's vector field of `cfg` on `backend`'s nodes (default: those of `[ode]`), with
    the step sizes of `[training]` and the `η²` terms as `sgd_noise` says (default
    `[ode] sgd_noise`)."""
    model = cfg.build_model() if model is None else model
    backend = ode_backend(cfg) if backend is None else backend
    noise = cfg.ode.sgd_noise if sgd_noise is None else bool(sgd_noise)
    return model.vector_field(cfg, backend, sgd_noise=noise, max_group=max_group)


def initial_state(cfg: Config, model: Any = None) -> Any:
    """The start described by `[ode] init` (see the config docs)."""
    return (cfg.build_model() if model is None else model).ode_start(cfg)


@dataclasses.dataclass(frozen=True)
class ODEProblem:
    """Everything a config says about one ODE run, as objects ([`build`][]): the `model`, its
    step sizes `steps`, the vector `field`, the `integrator`, the `start`, the save `times`,
    the expectation `backend` of the risk along the trajectory (None: closed forms), and the
    `sizing` of `[ode] samples = "auto"` (empty when not sized), and `cfg`, the config with
    `samples` resolved (the model's methods that report on the run read it)."""

    cfg: Config
    model: Any
    steps: StepSizes
    field: AbstractField
    integrator: Integrator
    start: Any
    times: np.ndarray
    backend: AbstractExpectation | None
    sizing: dict


def build(cfg: Config, start: Any = None, times=None,
          quantity: Callable[[ODEResult], Any] | None = None) -> ODEProblem:
    """The objects of one ODE run of `cfg`: from `start` (default: `[ode] init`) on `times`
    (default: the `[output]` grid), `[ode] samples = "auto"` sized first ([`sized`][]; a
    command's reported `quantity` of the solved run, for `[ode] quantity_target`; default the
    final risk). The one place where the config's strings become objects for the ODE."""
    model = cfg.build_model()
    start = initial_state(cfg, model) if start is None else start
    start = as_float64(model.ode_state(cfg, start))
    model.check_state(start)
    times = cfg.save_times() if times is None else np.asarray(times, dtype=np.float64)
    cfg, sizing = sized(cfg, model, start, times, quantity)
    return _problem(cfg, model, start, times, sizing)


def _problem(cfg: Config, model: Any, start: Any, times: np.ndarray,
             sizing: dict) -> ODEProblem:
    """[`build`][] once the start is in ODE form and `samples` is a number."""
    backend = ode_backend(cfg)
    field = build_field(cfg, model, backend)
    return ODEProblem(cfg=cfg, model=model, steps=field.steps, field=field,
                      integrator=Integrator.from_config(cfg.ode), start=start, times=times,
                      backend=backend, sizing=sizing)


def solve_problem(problem: ODEProblem, *, progress: bool = False) -> ODEResult:
    """Integrate `problem` and evaluate the risk and the field's error along the way."""
    p = problem
    sol = integrate(p.field, p.start, p.times, p.integrator, progress=progress)
    t0 = time.perf_counter()
    risk, err = jax.block_until_ready(p.model.state_risk(p.cfg, sol.overlaps, p.backend))
    t1 = time.perf_counter()
    every = max(1, (len(p.times) - 1) // 8)
    measured = np.asarray(relative_error(p.field,
                                         jax.tree.map(lambda x: x[::every], sol.overlaps)))
    t2 = time.perf_counter()
    exact = p.backend is None
    accuracy = {**p.sizing, "samples": None if exact else int(p.cfg.ode.samples),
                "expectation": p.cfg.ode.expectation, **p.model.ode_info(p.cfg, p.field),
                "relative_error_max": float(measured.max()),
                "relative_error_median": float(np.median(measured))}
    return ODEResult(t=sol.t, overlaps=sol.overlaps, risk=jnp.asarray(risk),
                     risk_err=jnp.asarray(err), num_steps=sol.num_steps,
                     num_rejected=sol.num_rejected, compile_s=sol.compile_s, run_s=sol.run_s,
                     accuracy=accuracy, model=p.model,
                     part_s={"risk": t1 - t0, "field_error": t2 - t1})


def run_ode(cfg: Config, ov0: Any = None, times=None, *, progress: bool = False) -> ODEResult:
    """Integrate the configured ODE from `ov0` (default: `[ode] init`) on `times` (default: the
    `[output]` grid) and evaluate the risk along the way: [`solve_problem`][] of
    [`build`][]."""
    t0 = time.perf_counter()
    problem = build(cfg, ov0, times)
    built = time.perf_counter() - t0
    res = solve_problem(problem, progress=progress)
    return dataclasses.replace(res, part_s={"build": built, **res.part_s})
