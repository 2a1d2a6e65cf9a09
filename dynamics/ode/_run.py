"""Integrating the ODEs of a configuration: the `headflow ode` engine."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float

from .._errors import ConfigError
from .._model import Model
from .._overlaps import Overlaps
from .._risk import population_risk, risk_nodes
from .._steps import StepSizes
from ..config import Config
from ..expectations import AbstractExpectation, AbstractNodes, get_expectation
from ..fields import MAX_GROUP, AbstractField, FullField, ManifoldField
from ..symbolic import SymbolicField
from ._integrate import Integrator, integrate
from ._state import random_start, symmetric_start


class ODEResult(eqx.Module):
    """An integrated trajectory: `t` (T), `overlaps` (leaves `(T, ...)`), the population risk
    `risk` (T) with its error estimate `risk_err` (T), and solver statistics."""

    t: Float[Array, " T"]
    overlaps: Overlaps
    risk: Float[Array, " T"]
    risk_err: Float[Array, " T"]
    num_steps: int = eqx.field(static=True, default=0)
    num_rejected: int = eqx.field(static=True, default=0)

    def arrays(self) -> dict[str, np.ndarray]:
        """The `ode.npz` arrays (see the README)."""
        return {"t": np.asarray(self.t), "risk": np.asarray(self.risk),
                "risk_err": np.asarray(self.risk_err), **self.overlaps.arrays()}


def backend_of(cfg: Config) -> AbstractExpectation:
    """The expectation backend of `[ode]` (`expectation`, `samples`, `seed`)."""
    return get_expectation(cfg.ode.expectation, cfg.ode.samples, seed=cfg.ode.seed)


_FIELDS: dict[tuple[str, str], type[ManifoldField | FullField | SymbolicField]] = {
    ("manifold", "autodiff"): ManifoldField,
    ("full", "autodiff"): FullField,
    ("manifold", "symbolic"): SymbolicField,
}


def build_field(cfg: Config, model: Model | None = None,
                backend: AbstractExpectation | None = None, *,
                max_group: int = MAX_GROUP) -> AbstractField:
    """The vector field selected by `[ode] form` and `[ode] rhs`, with the step sizes of
    `[training]` and the `η²` terms as `[ode] sgd_noise` says."""
    model = cfg.build_model() if model is None else model
    backend = backend_of(cfg) if backend is None else backend
    key = (cfg.ode.form, cfg.ode.rhs)
    if key not in _FIELDS:
        raise ConfigError(f"ode.rhs = {cfg.ode.rhs!r} is derived on the invariant manifold; "
                          "use ode.form = 'manifold'")
    return _FIELDS[key].build(model, StepSizes.from_config(cfg.training), backend,
                              sgd_noise=cfg.ode.sgd_noise, max_group=max_group)


def initial_state(cfg: Config, model: Model | None = None) -> Overlaps:
    """The start described by `[ode] init` (see the config docs)."""
    model = cfg.build_model() if model is None else model
    tr = cfg.training
    if cfg.ode.init == "symmetric":
        ov = symmetric_start(model, key_std=tr.init_key_std, value_std=tr.init_value_std,
                             bias=tr.init_bias)
        if not model.train_values:
            ov = eqx.tree_at(lambda o: (o.n, o.s), ov,
                             (jnp.full(model.H, model.rho), jnp.full((model.H,) * 2, model.rho)))
        return ov
    ov = random_start(model, jr.key(cfg.sim.seed), cfg.sim.dim, key_std=tr.init_key_std,
                      value_std=tr.init_value_std, bias=tr.init_bias)
    return ov.on_manifold() if cfg.ode.form == "manifold" else ov


def trajectory_risk(model: Model, ov: Overlaps, rule: AbstractExpectation | AbstractNodes, *,
                    manifold: bool) -> tuple[Array, Array]:
    """Population risk and its error along a trajectory (leaves `(T, ...)`; common random
    numbers)."""
    nodes = rule if isinstance(rule, AbstractNodes) else risk_nodes(model, rule)
    f = jax.jit(lambda o, nodes: jax.lax.map(
        lambda oi: population_risk(model, oi, nodes, manifold=manifold), o, batch_size=8))
    return f(ov, nodes)


def run_ode(cfg: Config, ov0: Overlaps | None = None, times=None, *,
            progress: bool = False) -> ODEResult:
    """Integrate the configured ODE from `ov0` (default: `[ode] init`) on `times` (default: the
    `[output]` grid) and evaluate the risk along the way."""
    model = cfg.build_model()
    backend = backend_of(cfg)
    field = build_field(cfg, model, backend)
    ov0 = initial_state(cfg, model) if ov0 is None else ov0
    if cfg.ode.form == "manifold":
        ov0 = ov0.on_manifold()
    times = cfg.save_times() if times is None else np.asarray(times, dtype=np.float64)
    sol = integrate(field, jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), ov0), times,
                    Integrator.from_config(cfg.ode), progress=progress)
    risk, err = trajectory_risk(model, sol.overlaps, backend,
                                manifold=cfg.ode.form == "manifold")
    return ODEResult(t=sol.t, overlaps=sol.overlaps, risk=risk, risk_err=err,
                     num_steps=sol.num_steps, num_rejected=sol.num_rejected)
