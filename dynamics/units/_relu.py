"""`g(x) = max(x, 0)`: the ReLU unit. Its two-point integral has a closed form (the arc-cosine
kernel); the three- and four-point integrals of the committee's drift do not in general, so the
node backends compute them, with their error estimate."""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
from jaxtyping import Array, Float

from ._base import AbstractUnit, register_unit


@register_unit
class ReLU(AbstractUnit):
    """`g(x) = max(x, 0)`, `g'(x) = 1[x > 0]`. Closed forms (`ρ = C01/√(C00 C11)`):
    `I2 = √(C00 C11) (√(1 − ρ²) + (π − arccos ρ) ρ) / (2π)` and
    `J2 = (π − arccos ρ) / (2π)`."""

    name: ClassVar[str] = "relu"
    label: ClassVar[str] = "ReLU"
    exact: ClassVar[bool] = False

    def __call__(self, x: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        # written with `where`, so that autodiff gives g'(0) = 0, the convention 1[x > 0]
        # (`jnp.maximum` would give 1/2 there, and a student started at w = 0 would move)
        return jnp.where(x > 0, x, 0.0)

    @staticmethod
    def _rho(C):
        s = jnp.sqrt(C[..., 0, 0] * C[..., 1, 1])
        return s, jnp.clip(C[..., 0, 1] / jnp.where(s > 0, s, 1.0), -1.0, 1.0)

    def i2(self, C: Float[Array, "*batch 2 2"]) -> Float[Array, "*batch"]:
        s, rho = self._rho(C)
        return s * (jnp.sqrt(1.0 - rho**2) + (jnp.pi - jnp.arccos(rho)) * rho) / (2.0 * jnp.pi)

    def j2(self, C: Float[Array, "*batch 2 2"]) -> Float[Array, "*batch"]:
        _, rho = self._rho(C)
        return (jnp.pi - jnp.arccos(rho)) / (2.0 * jnp.pi)
