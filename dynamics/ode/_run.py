"""Integrating the ODEs of a configuration: the `headflow ode` engine."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float

from .._model import Model
from .._overlaps import Overlaps
from .._risk import key_dims, population_risk
from ..config import Config
from ..expectations import AbstractExpectation, get_expectation
from ._fields import AbstractField, FullField, Hyper, ManifoldField
from ._integrate import integrate
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
        """The `ode.npz` arrays of the interface spec."""
        ov = self.overlaps
        out = {"t": self.t, "risk": self.risk, "risk_err": self.risk_err, "m": ov.m, "q": ov.q,
               "n": ov.n, "s": ov.s, "b": ov.b, "kv": ov.kv, "kvs": ov.kvs, "vks": ov.vks}
        return {k: np.asarray(v) for k, v in out.items()}


def backend_of(cfg: Config) -> AbstractExpectation:
    return get_expectation(cfg.ode.expectation, cfg.ode.samples, seed=cfg.ode.seed)


def build_field(cfg: Config, model: Model | None = None,
                backend: AbstractExpectation | None = None) -> AbstractField:
    """The vector field selected by `[ode] form` and `[ode] rhs`."""
    model = cfg.build_model() if model is None else model
    backend = backend_of(cfg) if backend is None else backend
    hyper = Hyper.from_config(cfg)
    if cfg.ode.rhs == "symbolic":
        from ..symbolic import SymbolicField  # generated code (docs/equations.md)

        if cfg.ode.form != "manifold":
            from .._errors import ConfigError

            raise ConfigError("ode.rhs = 'symbolic' is derived on the invariant manifold; "
                              "use ode.form = 'manifold'")
        return SymbolicField.build(model, hyper, backend)
    cls = ManifoldField if cfg.ode.form == "manifold" else FullField
    return cls.build(model, hyper, backend)


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


def trajectory_risk(model: Model, ov: Overlaps, backend: AbstractExpectation, *,
                    manifold: bool) -> tuple[Array, Array]:
    """Population risk and its error along a trajectory (common random numbers)."""
    nodes = backend.nodes(key_dims(model))
    f = jax.jit(lambda o, nodes: jax.lax.map(
        lambda oi: population_risk(model, oi, backend, nodes, manifold=manifold), o,
        batch_size=8))
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
    o = cfg.ode
    sol = integrate(field, jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), ov0), times,
                    solver=o.solver, rtol=o.rtol, atol=o.atol, max_steps=o.max_steps,
                    progress=progress)
    risk, err = trajectory_risk(model, sol.overlaps, backend, manifold=o.form == "manifold")
    return ODEResult(t=sol.t, overlaps=sol.overlaps, risk=risk, risk_err=err,
                     num_steps=sol.num_steps, num_rejected=sol.num_rejected)
