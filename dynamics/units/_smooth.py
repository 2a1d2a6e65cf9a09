"""Units without closed-form Gaussian integrals: `tanh`, `abs` and the teacher-only `sign` (the
node backends compute their expectations, with their error estimate)."""

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


@register_unit
class Sign(AbstractUnit):
    """`g(x) = sign(x)` (odd: information exponent 1), for teachers only: its derivative is
    zero almost everywhere, so a student of sign units would never move."""

    name: ClassVar[str] = "sign"
    label: ClassVar[str] = "sign"
    exact: ClassVar[bool] = False
    teacher_only: ClassVar[bool] = True

    def __call__(self, x: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        return jnp.sign(x)
