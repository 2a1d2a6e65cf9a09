"""What the attention model's differentiable learning curves
([`headflow.dynamics.ode.LearningCurve`][], [`headflow.dynamics.sde.SDECurve`][];
`docs/differentiable.md`) read from it: its hyperparameters ([`hyperparameters`][]: the step
sizes or their schedules, the weight decay, the initial scales, the prior's amplitude and the
label noise), the start whose scales they set ([`AttentionStart`][]) and the risk
([`AttentionRisk`][])."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from ..._errors import ConfigError
from ..._model import AttentionBase
from ..._overlaps import Overlaps
from ..._risk import population_risk
from ..._steps import StepSizes
from ...expectations import AbstractNodes
from .._params import CurvePoint, Hyperparameter, model_field
from ._start import initial_overlaps, random_start

PARAMS = ("training.lr", "training.lr_bias", "training.weight_decay", "training.init_key_std",
          "training.init_value_std", "training.init_bias", "prior.amplitude", "model.noise",
          "training.lr_schedule", "training.lr_bias_schedule")
"""Every config key the attention model's learning curves can differentiate through (a
config has those of [`hyperparameters`][]: a schedule's knot values replace its step size);
the two schedules stand for their knot `values` (arrays of K)."""


@dataclasses.dataclass(frozen=True)
class PriorAmplitude(Hyperparameter):
    """`prior.amplitude`: the prior scaled by `value / amplitude` about the config's
    `amplitude` (a traced factor: the priors' `scaled` bypasses their constructors'
    checks for it)."""

    amplitude: float = 1.0

    def get(self, point: CurvePoint) -> Any:
        return self.amplitude

    def set(self, point: CurvePoint, value: Any) -> CurvePoint:
        if self.amplitude == 0:
            raise ConfigError("learning curve: prior.amplitude is differentiated about the "
                              "config's value, which must be non-zero")
        prior = point.model.prior.scaled(value / self.amplitude)
        return eqx.tree_at(lambda p: p.model.prior, point, prior)


def _step(point: CurvePoint, name: str) -> Any:
    return getattr(point.steps, name)


def _schedule(point: CurvePoint, name: str) -> Any:
    return getattr(point.steps, name).values


def _start_scale(point: CurvePoint, name: str) -> Any:
    return getattr(point.start, name)


def hyperparameters(cfg: Any, steps: StepSizes) -> tuple[Hyperparameter, ...]:
    """The attention model's differentiable keys of `cfg` (those of [`PARAMS`][] it has), in
    that order: `training.lr` and `training.lr_bias` (or their schedules' knot values where
    the config sets schedules), `training.weight_decay`, the initial scales, `prior.amplitude`
    and `model.noise`."""
    out: list[Hyperparameter] = []
    for name in ("lr", "lr_bias"):
        if getattr(steps, f"{name}_schedule") is None:
            out.append(Hyperparameter(f"training.{name}", functools.partial(_step, name=name)))
    out.append(Hyperparameter("training.weight_decay",
                              functools.partial(_step, name="weight_decay")))
    for name in ("key_std", "value_std", "bias"):
        out.append(Hyperparameter(f"training.init_{name}",
                                  functools.partial(_start_scale, name=name)))
    out.append(PriorAmplitude("prior.amplitude", lambda p: p.model.prior,
                              amplitude=float(cfg.prior.amplitude)))
    out.append(Hyperparameter("model.noise", functools.partial(model_field, name="noise")))
    for name in ("lr_schedule", "lr_bias_schedule"):
        if getattr(steps, name) is not None:
            out.append(Hyperparameter(f"training.{name}", functools.partial(_schedule, name=name)))
    return tuple(out)


class AttentionStart(eqx.Module):
    """The start of the attention model's learning curves: the overlaps `[ode] init` names
    (`init`; cross overlaps dropped on the invariant `manifold`), or, for the SDE's paths
    (`sde`), one random initialization at D each ([`random_start`][]), with the initial
    scales `key_std`, `value_std`, `bias` (leaves: the curve substitutes them). `model` is the
    config's model with plain floats (its random draw does not depend on the substituted
    one)."""

    model: AttentionBase
    key_std: Float[Array, ""]
    value_std: Float[Array, ""]
    bias: Float[Array, ""]
    init: str = eqx.field(static=True, default="random")
    manifold: bool = eqx.field(static=True, default=False)
    sde: bool = eqx.field(static=True, default=False)

    def __call__(self, model: AttentionBase, key: PRNGKeyArray, dim: int) -> Overlaps:
        del model
        if self.sde:
            return random_start(self.model, key, dim, key_std=self.key_std,
                                value_std=self.value_std, bias=self.bias)
        ov = initial_overlaps(self.model, key, dim, init=self.init, key_std=self.key_std,
                              value_std=self.value_std, bias=self.bias,
                              manifold=self.manifold)
        return jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), ov)


class AttentionRisk(eqx.Module):
    """The population risk the attention model's curves record, on fixed `nodes` (on the
    invariant `manifold` for the ODE of the reduced form)."""

    nodes: AbstractNodes
    manifold: bool = eqx.field(static=True, default=False)

    def __call__(self, model: AttentionBase, state: Overlaps) -> Array:
        return population_risk(model, state, self.nodes, manifold=self.manifold)[0]
