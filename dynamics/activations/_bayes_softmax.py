from typing import ClassVar

import jax
from jaxtyping import Array, Float

from ._base import AbstractActivation, register_activation


@register_activation
class BayesSoftmax(AbstractActivation):
    """One softmax jointly over heads and tokens (spec §2),
    `A_{hℓ} = e^{χ_{hℓ}+b_h} / Σ_{h'ℓ'} e^{χ_{h'ℓ'}+b_{h'}}`.

    With one head per support point of a discrete prior it reproduces the Bayes posterior over
    the hidden location (spec §7). Adding a constant to all logits and biases changes nothing.
    """

    name: ClassVar[str] = "bayes_softmax"

    def __call__(self, logits: Float[Array, "heads tokens"],
                 bias: Float[Array, " heads"]) -> Float[Array, "heads tokens"]:
        u = logits + bias[:, None]
        return jax.nn.softmax(u.reshape(-1)).reshape(u.shape)
