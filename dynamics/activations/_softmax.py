"""Per-head softmax."""

from typing import ClassVar

import jax
from jaxtyping import Array, Float

from ._base import AbstractActivation, SymbolicDefinition, register_activation


@register_activation
class Softmax(AbstractActivation):
    """Per-head softmax over tokens, `A_{hℓ} = e^{χ_{hℓ}} / Σ_{ℓ'} e^{χ_{hℓ'}}`.

    The bias is accepted for a uniform interface and cancels exactly.
    """

    name: ClassVar[str] = "softmax"
    label: ClassVar[str] = "softmax"

    def __call__(self, logits: Float[Array, "heads tokens"],
                 bias: Float[Array, " heads"]) -> Float[Array, "heads tokens"]:
        del bias
        return jax.nn.softmax(logits, axis=-1)

    @classmethod
    def symbolic(cls, s) -> SymbolicDefinition:
        return SymbolicDefinition(
            numerator=lambda h, i: s.exp(s.chi[h, i]),
            normalizer=lambda h: s.sum(lambda t: s.exp(s.chi[h, t]), over=("token",)),
            latex=r"A_{h\ell} = \frac{e^{\chi_{h\ell}}}{\sum_{\ell'} e^{\chi_{h\ell'}}}")
