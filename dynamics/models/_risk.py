"""The generalization error of a model, `ε_g = ½ E[(ŷ − y*)²]` over the Gaussian fields (the
noiseless teacher output `y*`): in closed form for a readout whose unit gives `I2`, else by
nodes with their error estimate."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._linalg import psd_sqrt
from ..expectations import AbstractNodes
from ..units import AbstractUnit
from ._base import AbstractModel, GramState
from ._increment import _grid, _sub


def has_closed_risk(model: AbstractModel) -> bool:
    """Whether [`model_risk`][] is exact for `model` (a readout whose unit gives `I2`)."""
    ro = model.readout(model.limit_state().params)
    return ro is not None and type(ro.unit).i2 is not AbstractUnit.i2


def model_risk(model: AbstractModel, state: GramState, nodes: AbstractNodes | None = None
               ) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """`(ε_g, its error)` at one state: exact (error 0) where `has_closed_risk`, else by
    `nodes` over the `P` fields (standard normals, first `P` coordinates used)."""
    if has_closed_risk(model):
        ro = model.readout(state.params)
        assert ro is not None
        w = jnp.concatenate([ro.student, -ro.teacher])
        i2 = ro.unit.i2(_sub(state.gram, _grid(model.n_rows, model.n_rows)))
        return 0.5 * w @ i2 @ w, jnp.zeros((), state.gram.dtype)
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
