"""The attention model's learning curves as differentiable functions of the hyperparameters
(`docs/differentiable.md`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from ..._errors import ConfigError, require_x64
from ..._model import AttentionBase
from ..._overlaps import Overlaps
from ..._risk import population_risk, risk_nodes
from ..._schedule import Schedule
from ..._steps import StepSizes
from ...config import Config
from ...expectations import AbstractNodes
from ...fields import AbstractField
from ...ode import Integrator, backend_of, build_field, curve_solver, solve
from ._start import initial_overlaps

PARAMS = ("training.lr", "training.lr_bias", "training.weight_decay", "training.init_key_std",
          "training.init_value_std", "training.init_bias", "prior.amplitude", "model.noise",
          "training.lr_schedule", "training.lr_bias_schedule")
"""The keys of `params` that [`learning_curve`][] differentiates through: config keys
(`section.key`); the two schedules stand for their knot `values` (arrays of K)."""


def param_defaults(cfg: Config, steps: StepSizes) -> dict[str, np.ndarray]:
    """The config's values (float64) of every parameter of [`PARAMS`][] it has: the schedules'
    knot values where `steps` has a schedule, and then not `training.lr` / `training.lr_bias`,
    which they replace."""
    tr = cfg.training
    base: dict[str, Any] = {
        "training.lr": tr.lr, "training.lr_bias": tr.lr_bias,
        "training.weight_decay": tr.weight_decay, "training.init_key_std": tr.init_key_std,
        "training.init_value_std": tr.init_value_std, "training.init_bias": tr.init_bias,
        "prior.amplitude": float(cfg.prior.amplitude), "model.noise": cfg.model.noise}
    for name in ("lr_schedule", "lr_bias_schedule"):
        sched = getattr(steps, name)
        if sched is not None:      # the knot values replace the constant step size
            base[f"training.{name}"] = np.asarray(sched.values, dtype=np.float64)
            del base[f"training.{name.removesuffix('_schedule')}"]
    return {k: np.asarray(v, dtype=np.float64) for k, v in base.items()}


def substitute(params: Mapping[str, ArrayLike], base: Mapping[str, Any], model: AttentionBase,
               steps: StepSizes, amplitude: float
               ) -> tuple[AttentionBase, StepSizes, dict[str, Array]]:
    """`(model, steps, p)` with `params` substituted: `p` holds every parameter of `base`
    ([`param_defaults`][]), from `params` where given (float64, possibly traced); the step
    sizes, schedules' knot values, weight decay, label noise and prior amplitude (a factor
    about the config's `amplitude`) follow `p`. The one place where a parameter of
    [`PARAMS`][] enters a model, for the ODE's curve and the SDE's alike.

    **Raises:** [`headflow.dynamics.ConfigError`][] for an unknown parameter, a schedule the config
    does not set, a constant step size that a schedule replaces, or a zero `amplitude`."""
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        raise ConfigError(f"learning_curve: unknown parameter(s) {', '.join(unknown)}; "
                          f"differentiable ones: {', '.join(PARAMS)}")
    for name in ("lr_schedule", "lr_bias_schedule"):
        scheduled = getattr(steps, name) is not None
        if f"training.{name}" in params and not scheduled:
            raise ConfigError(f"learning_curve: training.{name} given but the config "
                              f"sets no [training] {name} (its knot times)")
        plain = f"training.{name.removesuffix('_schedule')}"
        if plain in params and scheduled:
            raise ConfigError(f"learning_curve: {plain} has no effect: the config sets "
                              f"training.{name}, which replaces it")
    p = {k: jnp.asarray(params[k] if k in params else v, jnp.float64) for k, v in base.items()}
    schedules: dict[str, Schedule | None] = {}
    for name in ("lr_schedule", "lr_bias_schedule"):
        sched = getattr(steps, name)
        schedules[name] = None if sched is None else sched.with_values(p[f"training.{name}"])
    steps = StepSizes(lr=p.get("training.lr", steps.lr),
                      lr_bias=p.get("training.lr_bias", steps.lr_bias),
                      weight_decay=p["training.weight_decay"], batch=steps.batch, **schedules)
    if "prior.amplitude" in params:
        if amplitude == 0:
            raise ConfigError("learning_curve: prior.amplitude is differentiated about the "
                              "config's value, which must be non-zero")
        # a traced factor: the priors' `scaled` bypass their constructors' checks for it
        model = eqx.tree_at(lambda m: m.prior, model, model.prior.scaled(p["prior.amplitude"]
                                                                         / amplitude))
    model = eqx.tree_at(lambda m: m.noise, model, p["model.noise"])
    return model, steps, p


class LearningCurve(eqx.Module):
    """The population risk on the save grid as a pure function of hyperparameters:
    `curve(params)` integrates the configured ODE with the step sizes, initial scales, prior
    amplitude and label noise that `params` gives (the config's values for the keys it leaves
    out) and returns the risk at `ts`. Differentiable in `params` (`jax.grad`, `jax.jacrev`) and
    jit-able (`eqx.filter_jit`); build it once per config with [`from_config`][].

    Everything but `params` is fixed at construction: the vector field's nodes and the risk's
    nodes (common random numbers, so the curve is a smooth function of `params`), the random
    start's draw at `[sim] dim` (its scales follow `params`), the integrator and the adjoint.

    **Fields:** `field` (the vector field at the config's values), `nodes` (of the risk), `ts`,
    `integrator`, `adjoint`, `key` and `start_model` (of the random start: the config's model
    with Python floats, static under `jit`), `base` (the config's values of
    [`PARAMS`][], float64), `amplitude` (the config's prior amplitude), `dim`, `init`,
    `manifold`.
    """

    field: AbstractField
    nodes: AbstractNodes
    ts: Float[Array, " T"]
    integrator: Integrator
    adjoint: dfx.AbstractAdjoint
    key: PRNGKeyArray
    start_model: AttentionBase
    base: dict[str, Any]
    amplitude: float = eqx.field(static=True)
    dim: int = eqx.field(static=True)
    init: str = eqx.field(static=True)
    manifold: bool = eqx.field(static=True)

    @classmethod
    def from_config(cls, cfg: Config, *, adjoint: str = "recursive",
                    checkpoints: int | None = 4096, times=None) -> LearningCurve:
        """**Arguments:** `cfg` (its `[model]`, `[prior]`, `[training]`, `[ode]` and the
        `[output]` grid, or `times`), `adjoint` (one of
        [`ADJOINTS`][headflow.dynamics.ode.ADJOINTS]), `checkpoints` (of the
        recursive adjoint: with at least as many as the solver takes steps, nothing is
        recomputed; None: diffrax's `log(max_steps)`). The blow-up event of the integrator is
        kept for the recursive adjoint and dropped for backsolve (which cannot take events)."""
        require_x64("the differentiable learning curve")
        model = cfg.build_model()
        backend = backend_of(cfg)
        field = build_field(cfg, model, backend)
        integrator, adj, ts = curve_solver(cfg, field, adjoint, checkpoints, times)
        return cls(field=field, nodes=risk_nodes(model, backend), ts=ts,
                   integrator=integrator, adjoint=adj,
                   key=jr.key(cfg.sim.seed), start_model=model,
                   base=param_defaults(cfg, field.steps),
                   amplitude=float(cfg.prior.amplitude), dim=int(cfg.sim.dim),
                   init=str(cfg.ode.init), manifold=cfg.ode.form == "manifold")

    def defaults(self) -> dict[str, Array]:
        """The config's values of every parameter it has: the schedules' knot values where
        set, and then not `training.lr` / `training.lr_bias`, which they replace."""
        return {k: jnp.asarray(v) for k, v in self.base.items()}

    def field_and_start(self, params: Mapping[str, ArrayLike]
                        ) -> tuple[AbstractField, Overlaps]:
        """The vector field and the initial overlaps with `params` substituted."""
        model, steps, p = substitute(params, self.base, self.field.model, self.field.steps,
                                     self.amplitude)
        field = eqx.tree_at(lambda f: (f.model, f.steps), self.field, (model, steps))
        ov0 = initial_overlaps(self.start_model, self.key, self.dim, init=self.init,
                               key_std=p["training.init_key_std"],
                               value_std=p["training.init_value_std"],
                               bias=p["training.init_bias"], manifold=self.manifold)
        return field, jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), ov0)

    def overlaps(self, params: Mapping[str, ArrayLike]) -> tuple[Overlaps, Array]:
        """The solution on `ts` (leaves `(T, ...)`) and whether the solve succeeded."""
        _, ys, ok = self._solve(params)
        return ys, ok

    def _solve(self, params: Mapping[str, ArrayLike]):
        field, ov0 = self.field_and_start(params)
        sol = solve(dfx.ODETerm(field), ov0, self.ts, self.integrator, adjoint=self.adjoint)
        assert sol.ys is not None
        return field, sol.ys, sol.result == dfx.RESULTS.successful

    def __call__(self, params: Mapping[str, ArrayLike]) -> Float[Array, " T"]:
        """The population risk at `ts`; NaN everywhere when the solve failed (blow-up, NaN,
        `max_steps`)."""
        field, ys, ok = self._solve(params)
        risk = jax.lax.map(lambda o: population_risk(field.model, o, self.nodes,
                                                     manifold=self.manifold)[0],
                           ys, batch_size=8)
        return jnp.where(ok, risk, jnp.nan)


def learning_curve(params: Mapping[str, ArrayLike], cfg: Config, *,
                   adjoint: str = "recursive") -> Float[Array, " T"]:
    """The population risk on `cfg`'s save grid as a pure, differentiable function of
    `params`: a dict with any of [`PARAMS`][] (config keys; the schedules' knot values as
    arrays); the config gives the others.

    ```python
    cfg = d.load_config("validation/configs/demo.toml")
    risk_T = lambda p: learning_curve(p, cfg)[-1]
    jax.grad(risk_T)({"training.lr": 1.0, "prior.amplitude": 3.0})
    ```

    For repeated calls build [`LearningCurve.from_config`][] once and `eqx.filter_jit` it.
    """
    return LearningCurve.from_config(cfg, adjoint=adjoint)(params)


