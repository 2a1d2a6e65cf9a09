"""Units without closed-form Gaussian integrals: `tanh` and `abs` (the node backends compute
their expectations, with their error estimate)."""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
from jaxtyping import Array, Float

from ._base import AbstractUnit, register_unit


@register_unit
class Tanh(AbstractUnit):
    """`g(x) = tanh(x)` (information exponent 1)."""

    name: ClassVar[str] = "tanh"
    label: ClassVar[str] = "tanh"
    exact: ClassVar[bool] = False

    def __call__(self, x: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        return jnp.tanh(x)


@register_unit
class Abs(AbstractUnit):
    """`g(x) = |x|` (even: information exponent 2), with `g'(x) = sign(x)` and `g'(0) = 0`."""

    name: ClassVar[str] = "abs"
    label: ClassVar[str] = "|x|"
    exact: ClassVar[bool] = False

    def __call__(self, x: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        # written with `where`, so that autodiff gives g'(0) = 0
        return jnp.where(x > 0, x, jnp.where(x < 0, -x, 0.0))
