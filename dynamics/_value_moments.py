"""What the attention model's value side hands to its risk: the index of the signal token and
the conditional moments of the value fields given the key fields (`docs/model.md`)."""

from __future__ import annotations

import equinox as eqx
from jaxtyping import Array, Float, Scalar

SIGNAL = 0
"""Index of the token carrying the signal in every expectation (nothing depends on position,
so the hidden location is fixed to the first token there; the simulator draws it uniformly)."""


class ValueMoments(eqx.Module):
    """Conditional moments of the value fields given the key fields (one sample)."""

    mz: Float[Array, "heads tokens"]
    my: Scalar
    szz: Float[Array, "heads heads"]
    szy: Float[Array, " heads"]
    syy: Scalar
