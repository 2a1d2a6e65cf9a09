"""Polynomial units: the probabilists' Hermite polynomials `he1` … `he4` and `square` (`x²`).

Their Gaussian integrals (`I2`, `I3`, `I4`, `J2`, `docs/committee.md`) are polynomials in the
covariance. headflow evaluates them exactly, on a tensor Gauss–Hermite rule in standard normal
coordinates `x = A z` (`A Aᵀ = C`, from the eigendecomposition, so a singular covariance, two
fields being one, is exact too) whose order covers the integrand's degree: the integrand of a
unit of degree `d` has total degree `2d` (`I2`, `I3`), `4d − 2` (`I4`) or `2d − 2` (`J2`) in
`z`.
"""

from __future__ import annotations

import functools
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..expectations import exact_rule
from ._base import AbstractUnit, register_unit


def gaussian_expectation(f, C: Float[Array, "*batch k k"], degree: int
                         ) -> Float[Array, "*batch"]:
    """`E f(x)` for `x ~ N(0, C)` on the tensor Gauss–Hermite rule that is exact for every
    polynomial of total degree at most `degree` in standard normal coordinates `z`, `x = A z`
    ([`headflow.dynamics.expectations.exact_rule`][]). `f` maps the fields `(..., k)` to values
    `(...)`."""
    k = C.shape[-1]
    z, w = _rule(k, degree)
    sym = 0.5 * (C + jnp.swapaxes(C, -1, -2))
    lam, V = jnp.linalg.eigh(sym)
    A = V * jnp.sqrt(jnp.maximum(lam, 0.0))[..., None, :]             # A Aᵀ = C
    x = jnp.einsum("...ij,nj->...ni", A, jnp.asarray(z, C.dtype))     # (..., nodes, k)
    return jnp.einsum("...n,n->...", f(x), jnp.asarray(w, C.dtype))


@functools.cache
def _rule(k: int, degree: int) -> tuple[np.ndarray, np.ndarray]:
    """The nodes `(n, k)` and weights `(n,)` of [`exact_rule`][]`(k, degree)`, built once per
    size and degree (every trace of a field asks for the same few)."""
    rule = exact_rule(k, degree)
    assert rule is not None, (k, degree)          # the units' integrals stay far below its cap
    with jax.ensure_compile_time_eval():          # constants, also when first asked in a trace
        nodes = rule.nodes(k)
        return np.asarray(nodes.x), np.asarray(nodes.w)


class PolynomialUnit(AbstractUnit):
    """A unit that is a polynomial of degree `degree`: its four Gaussian integrals are exact
    (Gauss–Hermite of sufficient order), so `[ode] expectation = "exact"` needs no nodes."""

    degree: ClassVar[int]
    exact: ClassVar[bool] = True

    def derivative(self, x: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        """`g'(x)`, elementwise, by autodiff of `__call__` (the derivative the SGD step uses)."""
        return jnp.vectorize(jax.grad(self.__call__))(x)

    def i2(self, C: Float[Array, "*batch 2 2"]) -> Float[Array, "*batch"]:
        return gaussian_expectation(lambda x: self(x[..., 0]) * self(x[..., 1]), C,
                                    2 * self.degree)

    def j2(self, C: Float[Array, "*batch 2 2"]) -> Float[Array, "*batch"]:
        return gaussian_expectation(
            lambda x: self.derivative(x[..., 0]) * self.derivative(x[..., 1]), C,
            2 * self.degree - 2)

    def i3(self, C: Float[Array, "*batch 3 3"]) -> Float[Array, "*batch"]:
        return gaussian_expectation(
            lambda x: self.derivative(x[..., 0]) * x[..., 1] * self(x[..., 2]), C,
            2 * self.degree)

    def i4(self, C: Float[Array, "*batch 4 4"]) -> Float[Array, "*batch"]:
        return gaussian_expectation(
            lambda x: (self.derivative(x[..., 0]) * self.derivative(x[..., 1])
                       * self(x[..., 2]) * self(x[..., 3])), C, 4 * self.degree - 2)


def polynomial_degree(*units: AbstractUnit) -> int | None:
    """The largest degree of `units` when every one is a polynomial ([`PolynomialUnit`][]),
    else None: what a model built of these units declares as its `polynomial_degree()`, so that
    its expectations are exact."""
    degrees = [u.degree for u in units if isinstance(u, PolynomialUnit)]
    return max(degrees) if len(degrees) == len(units) else None


def hermite(k: int, x: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
    """The probabilists' Hermite polynomial `He_k(x)` (`He_0 = 1`, `He_1 = x`,
    `He_{k+1} = x He_k − k He_{k−1}`): orthogonal under the standard normal law, with
    `E[He_j(z) He_k(z)] = k! δ_jk`."""
    prev, cur = jnp.ones_like(x), x
    if k == 0:
        return prev
    for j in range(1, k):
        prev, cur = cur, x * cur - j * prev
    return cur


class Hermite(PolynomialUnit):
    """`g = He_k`, the probabilists' Hermite polynomial of order `k = degree`: its only
    non-zero Hermite coefficient is the `k`-th, so its information exponent is `k`."""

    def __call__(self, x: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        return hermite(self.degree, x)


@register_unit
class He1(Hermite):
    """`He_1(x) = x`."""

    name: ClassVar[str] = "he1"
    label: ClassVar[str] = "He₁"
    degree: ClassVar[int] = 1


@register_unit
class He2(Hermite):
    """`He_2(x) = x² − 1`."""

    name: ClassVar[str] = "he2"
    label: ClassVar[str] = "He₂"
    degree: ClassVar[int] = 2


@register_unit
class He3(Hermite):
    """`He_3(x) = x³ − 3x`."""

    name: ClassVar[str] = "he3"
    label: ClassVar[str] = "He₃"
    degree: ClassVar[int] = 3


@register_unit
class He4(Hermite):
    """`He_4(x) = x⁴ − 6x² + 3`."""

    name: ClassVar[str] = "he4"
    label: ClassVar[str] = "He₄"
    degree: ClassVar[int] = 4


@register_unit
class Square(PolynomialUnit):
    """`g(x) = x² = He_2(x) + 1`: phase retrieval's unit (information exponent 2)."""

    name: ClassVar[str] = "square"
    label: ClassVar[str] = "x²"
    degree: ClassVar[int] = 2

    def __call__(self, x: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        return x * x
