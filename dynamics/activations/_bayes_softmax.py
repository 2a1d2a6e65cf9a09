"""Bayes-softmax: one softmax jointly over heads and tokens."""

from typing import ClassVar

import jax
from jaxtyping import Array, Float

from ._base import AbstractActivation, SymbolicDefinition, register_activation


@register_activation
class BayesSoftmax(AbstractActivation):
    """One softmax jointly over heads and tokens,
    `A_{hℓ} = e^{χ_{hℓ}+b_h} / Σ_{h'ℓ'} e^{χ_{h'ℓ'}+b_{h'}}`.

    With one head per support point of a discrete prior it reproduces the Bayes posterior over
    the hidden location (`docs/model.md#bayes-optimal-risk-and-the-bayes-softmax-construction`).
    Adding a constant to all logits and biases changes nothing.
    """

    name: ClassVar[str] = "bayes_softmax"
    label: ClassVar[str] = "Bayes-softmax"

    def __call__(self, logits: Float[Array, "heads tokens"],
                 bias: Float[Array, " heads"]) -> Float[Array, "heads tokens"]:
        u = logits + bias[:, None]
        return jax.nn.softmax(u.reshape(-1)).reshape(u.shape)

    @classmethod
    def symbolic(cls, s) -> SymbolicDefinition:
        return SymbolicDefinition(
            numerator=lambda h, i: s.exp(s.chi[h, i] + s.b[h]),
            normalizer=lambda h: s.sum(lambda g, t: s.exp(s.chi[g, t] + s.b[g]),
                                       over=("head", "token")),
            latex=r"A_{h\ell} = \frac{e^{\chi_{h\ell} + b_h}}{\sum_{h'\ell'} "
                  r"e^{\chi_{h'\ell'} + b_{h'}}}")
