"""Integrating the ODEs of a configuration: the `headflow ode` engine."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float

from .._errors import ConfigError, HeadflowError
from .._model import Model
from .._overlaps import Overlaps
from .._risk import population_risk, risk_nodes
from .._steps import StepSizes
from ..config import Config
from ..expectations import AUTO_MAX_SAMPLES, AbstractExpectation, AbstractNodes, get_expectation
from ..fields import MAX_GROUP, AbstractField, FullField, ManifoldField
from ..symbolic import SymbolicField, symbolic_names
from ._integrate import Integrator, integrate, traced_values
from ..models import GramState
from ._models import as_float64, model_arrays, model_field, model_start, risk_rule, states_risk
from ._state import initial_overlaps


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
    """A model of the family (None: the attention model, whose state is `Overlaps`)."""

    def arrays(self) -> dict[str, np.ndarray]:
        """The `ode.npz` arrays (see the README)."""
        named = (self.overlaps.arrays() if self.model is None
                 else model_arrays(self.model, self.overlaps))
        return {"t": np.asarray(self.t), "risk": np.asarray(self.risk),
                "risk_err": np.asarray(self.risk_err), **named}


AUTO_PILOT = 2048
"""Nodes of the pilot run that sizes `[ode] samples = "auto"`."""

AUTO_FALLBACK = 16384
"""`samples = "auto"` where no pilot run is made (sweeps, stability analysis)
(`docs/ode.md#expectation-backends`)."""


CONVERGENCE_RATE = {"mc": 0.5, "qmc": 0.7}
"""Error `∝ n^{-rate}` assumed when sizing `samples = "auto"` (see [`sized`][])."""


def backend_of(cfg: Config) -> AbstractExpectation:
    """The expectation backend of `[ode]` (`expectation`, `samples`, `seed`)."""
    samples = AUTO_FALLBACK if cfg.ode.samples == "auto" else int(cfg.ode.samples)
    return get_expectation(cfg.ode.expectation, samples, seed=cfg.ode.seed)


def resolved_rhs(cfg: Config, model: Model | None = None) -> str:
    """`[ode] rhs`, with `"auto"` resolved: the generated (symbolic) right-hand side for the
    manifold form of an activation that has a symbolic definition (several times faster at the
    same nodes), else autodiff."""
    if cfg.ode.rhs != "auto":
        return cfg.ode.rhs
    model = cfg.build_model() if model is None else model
    symbolic = cfg.ode.form == "manifold" and model.activation.name in symbolic_names()
    return "symbolic" if symbolic else "autodiff"


def error_target(cfg: Config) -> float:
    """The largest relative error of the vector field that `samples = "auto"` aims for:
    `[ode] error_target`, by default `10⁴ · rtol` (0.01 at the default tolerance)."""
    o = cfg.ode
    return float(o.error_target) if o.error_target is not None else 1e4 * o.rtol


@eqx.filter_jit
def _sizes_and_errors(field: AbstractField, ovs: Overlaps | GramState) -> tuple[Array, Array]:
    def one(ov):
        rhs, err = field.with_error(ov)
        r = jnp.concatenate([jnp.ravel(x) for x in jax.tree.leaves(rhs)])
        e = jnp.concatenate([jnp.ravel(x) for x in jax.tree.leaves(err)])
        return jnp.max(jnp.abs(r)), jnp.max(e)

    return jax.lax.map(one, ovs)


def relative_error(field: AbstractField, ovs: Overlaps | GramState) -> np.ndarray:
    """The error of the vector field at each state of `ovs` (leaves `(k, ...)`), by the nodes'
    own rule, relative to the field's largest size over those states:
    `max_i err_i(state) / max_states max_i |RHS_i|`. (Relative to the field at the same state
    it would diverge at every stationary point, where the field vanishes.)"""
    size, err = (np.asarray(x) for x in _sizes_and_errors(field, ovs))
    return err / max(float(np.max(size)), 1e-300)


def sized(cfg: Config, model: Model, ov0: Overlaps, times) -> tuple[Config, dict]:
    """`cfg` with `[ode] samples = "auto"` resolved, and what was measured to size it.

    A pilot run with `AUTO_PILOT` nodes integrates the same ODE over the same span (9 saved
    states) and measures the error of its field along the way ([`relative_error`][]); the count
    is then scaled by the convergence rate of the backend, `n^{-1/2}` for Monte Carlo and
    `n^{-0.7}` for QMC (an assumed rate: the pilot's measured error is what the count rests on), to
    meet [`error_target`][], rounded up to a power of
    two, at most `AUTO_MAX_SAMPLES`. An explicit `samples` is returned unchanged.
    """
    if cfg.ode.samples != "auto":
        return cfg, {}
    target = error_target(cfg)
    pilot = cfg.replace(**{"ode.samples": AUTO_PILOT})
    field = build_field(pilot, model)
    states = jax.tree.map(lambda x: x[None], ov0)
    try:
        sol = integrate(field, ov0, np.linspace(times[0], times[-1], 9),
                        Integrator.from_config(cfg.ode))
        states = sol.overlaps
    except HeadflowError:           # the real run reports it; size from the start alone
        pass
    eps = float(np.max(relative_error(field, states)))
    rate = CONVERGENCE_RATE.get(cfg.ode.expectation, 0.5)
    want = AUTO_PILOT * (eps / target) ** (1.0 / rate) if np.isfinite(eps) else AUTO_MAX_SAMPLES
    n = int(min(max(2 ** int(np.ceil(np.log2(max(want, 1.0)))), AUTO_PILOT),
                AUTO_MAX_SAMPLES))
    return cfg.replace(**{"ode.samples": n}), {"target": target, "pilot_samples": AUTO_PILOT,
                                               "pilot_error": eps, "samples": n}


_FIELDS: dict[tuple[str, str], type[ManifoldField | FullField | SymbolicField]] = {
    ("manifold", "autodiff"): ManifoldField,
    ("full", "autodiff"): FullField,
    ("manifold", "symbolic"): SymbolicField,
}


def field_class(cfg: Config, model: Model | None = None
                ) -> type[ManifoldField | FullField | SymbolicField]:
    """The vector-field class selected by `[ode] form` and `[ode] rhs` (`"auto"` resolved by
    [`resolved_rhs`][])."""
    key = (cfg.ode.form, resolved_rhs(cfg, model))
    if key not in _FIELDS:
        raise ConfigError(f"ode.rhs = {cfg.ode.rhs!r} is derived on the invariant manifold; "
                          "use ode.form = 'manifold'")
    return _FIELDS[key]


def build_field(cfg: Config, model: Model | None = None,
                backend: AbstractExpectation | None = None, *,
                max_group: int = MAX_GROUP) -> AbstractField:
    """The vector field selected by `[ode] form` and `[ode] rhs`, with the step sizes of
    `[training]` and the `η²` terms as `[ode] sgd_noise` says."""
    model = cfg.build_model() if model is None else model
    backend = backend_of(cfg) if backend is None else backend
    return field_class(cfg, model).build(traced_values(model),
                              traced_values(StepSizes.from_config(cfg.training)), backend,
                              sgd_noise=cfg.ode.sgd_noise, max_group=max_group)


def initial_state(cfg: Config, model: Model | None = None) -> Overlaps:
    """The start described by `[ode] init` (see the config docs)."""
    model = cfg.build_model() if model is None else model
    tr = cfg.training
    return eqx.filter_jit(initial_overlaps)(
        model, jr.key(cfg.sim.seed), cfg.sim.dim, init=cfg.ode.init, key_std=tr.init_key_std,
        value_std=tr.init_value_std, bias=tr.init_bias, manifold=cfg.ode.form == "manifold")


def trajectory_risk(model: Model, ov: Overlaps, rule: AbstractExpectation | AbstractNodes, *,
                    manifold: bool) -> tuple[Array, Array]:
    """Population risk and its error along a trajectory (leaves `(T, ...)`; common random
    numbers)."""
    nodes = rule if isinstance(rule, AbstractNodes) else risk_nodes(model, rule)
    return _risk_along(traced_values(model), ov, nodes, manifold)


@eqx.filter_jit
def _risk_along(model, ov, nodes, manifold):
    return jax.lax.map(lambda oi: population_risk(model, oi, nodes, manifold=manifold), ov,
                       batch_size=8)


def run_ode(cfg: Config, ov0: Overlaps | GramState | None = None, times=None, *,
            progress: bool = False) -> ODEResult:
    """Integrate the configured ODE from `ov0` (default: `[ode] init`) on `times` (default: the
    `[output]` grid) and evaluate the risk along the way."""
    if cfg.model_kind != "attention":
        return _run_model_ode(cfg, ov0, times, progress=progress)
    if isinstance(ov0, GramState):
        raise HeadflowError("the attention model's start is an Overlaps, not a GramState")
    model = cfg.build_model()
    start: Overlaps = initial_state(cfg, model) if ov0 is None else ov0
    if cfg.ode.form == "manifold":
        start = start.on_manifold()
    start = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), start)
    times = cfg.save_times() if times is None else np.asarray(times, dtype=np.float64)
    cfg, sizing = sized(cfg, model, start, times)
    backend = backend_of(cfg)
    field = build_field(cfg, model, backend)
    sol = integrate(field, start, times, Integrator.from_config(cfg.ode), progress=progress)
    risk, err = trajectory_risk(model, sol.overlaps, backend,
                                manifold=cfg.ode.form == "manifold")
    every = max(1, (len(times) - 1) // 8)
    measured = relative_error(field, jax.tree.map(lambda x: x[::every], sol.overlaps))
    accuracy = {**sizing, "samples": int(cfg.ode.samples), "expectation": cfg.ode.expectation,
                "rhs": resolved_rhs(cfg, model), "relative_error_max": float(measured.max()),
                "relative_error_median": float(np.median(measured))}
    return ODEResult(t=sol.t, overlaps=sol.overlaps, risk=risk, risk_err=err,
                     num_steps=sol.num_steps, num_rejected=sol.num_rejected,
                     compile_s=sol.compile_s, run_s=sol.run_s, accuracy=accuracy)


def _run_model_ode(cfg: Config, state0, times, *, progress: bool) -> ODEResult:
    """[`run_ode`][] for a model of the family (`docs/models.md`)."""
    model = cfg.build_model()
    state0 = as_float64(model_start(cfg, model) if state0 is None else state0)
    times = cfg.save_times() if times is None else np.asarray(times, dtype=np.float64)
    field = model_field(cfg, model)
    sol = integrate(field, state0, times, Integrator.from_config(cfg.ode), progress=progress)
    risk, err = states_risk(model, sol.overlaps, risk_rule(cfg))
    every = max(1, (len(times) - 1) // 8)
    measured = relative_error(field, jax.tree.map(lambda x: x[::every], sol.overlaps))
    accuracy = {"expectation": cfg.ode.expectation,
                "samples": None if cfg.ode.expectation == "exact" else int(field.nodes.size),
                "relative_error_max": float(measured.max()),
                "relative_error_median": float(np.median(measured))}
    return ODEResult(t=sol.t, overlaps=sol.overlaps, risk=jnp.asarray(risk),
                     risk_err=jnp.asarray(err), num_steps=sol.num_steps,
                     num_rejected=sol.num_rejected, compile_s=sol.compile_s, run_s=sol.run_s,
                     accuracy=accuracy, model=model)
