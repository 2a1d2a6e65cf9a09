"""The attention model's choice of ODE vector field (the reduced form on the invariant manifold,
the full local-field form, the generated symbolic right-hand side) and its risk along a
trajectory."""

from __future__ import annotations

from typing import Any

import equinox as eqx
from jaxtyping import Array

from ..._errors import ConfigError
from ..._exported import call_exported
from ..._model import AttentionBase
from ..._overlaps import Overlaps
from ..._risk import population_risk, risk_nodes
from ...config import Config
from ...expectations import AbstractExpectation, AbstractNodes
from ...ode import traced_values
from ...sharding import map_batched
from ._full import FullField
from ._manifold import ManifoldField


def resolved_rhs(cfg: Config, model: AttentionBase | None = None) -> str:
    """`[ode] rhs`, with `"auto"` resolved: the generated (symbolic) right-hand side for the
    manifold form of an activation that has a symbolic definition (several times faster at the
    same nodes), else autodiff."""
    if cfg.ode.rhs != "auto":
        return cfg.ode.rhs
    if cfg.ode.form != "manifold":
        return "autodiff"
    from ...symbolic import symbolic_names        # sympy: only where the rhs may be generated

    model = cfg.build_model() if model is None else model
    return "symbolic" if model.activation.name in symbolic_names() else "autodiff"


def field_class(cfg: Config, model: AttentionBase | None = None) -> Any:
    """The vector-field class selected by `[ode] form` and `[ode] rhs` (`"auto"` resolved by
    [`resolved_rhs`][]): [`ManifoldField`][], [`FullField`][] or
    [`headflow.dynamics.symbolic.SymbolicField`][] (imported, with sympy, only when selected)."""
    key = (cfg.ode.form, resolved_rhs(cfg, model))
    if key == ("manifold", "autodiff"):
        return ManifoldField
    if key == ("full", "autodiff"):
        return FullField
    if key == ("manifold", "symbolic"):
        from ...symbolic import SymbolicField

        return SymbolicField
    raise ConfigError(f"ode.rhs = {cfg.ode.rhs!r} is derived on the invariant manifold; "
                      "use ode.form = 'manifold'")


def trajectory_risk(model: AttentionBase, ov: Overlaps,
                    rule: AbstractExpectation | AbstractNodes, *,
                    manifold: bool) -> tuple[Array, Array]:
    """Population risk and its error along a trajectory (leaves `(T, ...)`; common random
    numbers)."""
    nodes = rule if isinstance(rule, AbstractNodes) else risk_nodes(model, rule)
    return call_exported(_risk_along, traced_values(model), ov, nodes, manifold)


@eqx.filter_jit
def _risk_along(model, ov, nodes, manifold):
    return map_batched(lambda oi: population_risk(model, oi, nodes, manifold=manifold), ov, 8)
