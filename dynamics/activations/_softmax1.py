"""Per-head "off-by-one" softmax."""

from typing import ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ._base import AbstractActivation, SymbolicDefinition, register_activation


@register_activation
class Softmax1(AbstractActivation):
    """Per-head "off-by-one" softmax, `A_{hℓ} = e^{χ_{hℓ}+b_h} / (1 + Σ_{ℓ'} e^{χ_{hℓ'}+b_h})`.

    Rows sum to less than one, so a head can switch itself off (large negative `b_h`).
    Stable form: with `M = max(0, max_ℓ(χ+b))` the "1" becomes `e^{-M}`.
    """

    name: ClassVar[str] = "softmax1"
    label: ClassVar[str] = "softmax-1"

    def __call__(self, logits: Float[Array, "heads tokens"],
                 bias: Float[Array, " heads"]) -> Float[Array, "heads tokens"]:
        u = logits + bias[:, None]
        top = jax.lax.stop_gradient(jnp.maximum(jnp.max(u, axis=-1, keepdims=True), 0.0))
        e = jnp.exp(u - top)
        return e / (jnp.exp(-top) + jnp.sum(e, axis=-1, keepdims=True))

    @classmethod
    def symbolic(cls, s) -> SymbolicDefinition:
        return SymbolicDefinition(
            numerator=lambda h, i: s.exp(s.chi[h, i] + s.b[h]),
            normalizer=lambda h: 1 + s.sum(lambda t: s.exp(s.chi[h, t] + s.b[h]),
                                           over=("token",)),
            latex=r"A_{h\ell} = \frac{e^{\chi_{h\ell} + b_h}}{1 + \sum_{\ell'} "
                  r"e^{\chi_{h\ell'} + b_h}}")
