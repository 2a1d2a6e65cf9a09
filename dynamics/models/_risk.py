"""The generalization error of a model, `ε_g = ½ E[(ŷ − y*)²]` over the Gaussian fields (the
noiseless teacher output `y*`): in closed form for a readout whose unit gives `I2`, else by
nodes with their error estimate."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._linalg import psd_sqrt
from ..expectations import AbstractNodes, exact_rule
from ..units import AbstractUnit
from ._base import GramState, ModelBase
from ..units._tables import grid, sub


def exact_risk_nodes(model: ModelBase) -> AbstractNodes | None:
    """Gauss–Hermite nodes over the `P` fields on which the risk of a polynomial model
    (`AbstractModel.polynomial_degree`) is exact, error estimate included; None for other
    models, or when the rule would be too large."""
    d = model.polynomial_degree()
    if d is None:
        return None
    rule = exact_rule(model.n_rows, 2 * d)
    return None if rule is None else rule.nodes(model.n_rows)


def has_closed_risk(model: ModelBase) -> bool:
    """Whether [`model_risk`][] is exact for `model` (a readout whose unit gives `I2`)."""
    ro = model.readout(model.limit_state().params)
    return ro is not None and type(ro.unit).i2 is not AbstractUnit.i2


def model_risk(model: ModelBase, state: GramState, nodes: AbstractNodes | None = None
               ) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """`(ε_g, its error)` at one state: exact (error 0) where `has_closed_risk`, exact on
    `exact_risk_nodes` for a polynomial model, else by `nodes` over the `P` fields
    (standard normals, first `P` coordinates used)."""
    if has_closed_risk(model):
        ro = model.readout(state.params)
        assert ro is not None
        w = jnp.concatenate([ro.student, -ro.teacher])
        i2 = ro.unit.i2(sub(state.gram, grid(model.n_rows, model.n_rows)))
        return 0.5 * w @ i2 @ w, jnp.zeros((), state.gram.dtype)
    nodes = exact_risk_nodes(model) or nodes
    if nodes is None:
        raise ValueError("this model's risk needs nodes")
    S, P = model.n_students, model.n_rows
    root = psd_sqrt(state.gram)

    def per(xs):
        def one(x):
            lam = root @ x[:P]
            return 0.5 * (model.predict(state.params, lam[:S])
                          - model.target(state.params, lam[S:])) ** 2
        return jax.vmap(one)(xs)

    return nodes.estimate(per)
