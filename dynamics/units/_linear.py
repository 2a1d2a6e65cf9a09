"""`g(x) = x`: the linear unit, whose integrals are moments of the covariance."""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
from jaxtyping import Array, Float

from ._base import AbstractUnit, register_unit


@register_unit
class Linear(AbstractUnit):
    """`g(x) = x`, `g' = 1`: `I2 = C01`, `J2 = 1`, `I3 = C12`, `I4 = C23`."""

    name: ClassVar[str] = "linear"
    label: ClassVar[str] = "linear"
    exact: ClassVar[bool] = True

    def __call__(self, x: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        return x


    def i2(self, C: Float[Array, "*batch 2 2"]) -> Float[Array, "*batch"]:
        return C[..., 0, 1]

    def j2(self, C: Float[Array, "*batch 2 2"]) -> Float[Array, "*batch"]:
        return jnp.ones_like(C[..., 0, 1])

    def i3(self, C: Float[Array, "*batch 3 3"]) -> Float[Array, "*batch"]:
        return C[..., 1, 2]

    def i4(self, C: Float[Array, "*batch 4 4"]) -> Float[Array, "*batch"]:
        return C[..., 2, 3]
