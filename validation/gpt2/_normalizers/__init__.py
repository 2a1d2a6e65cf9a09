"""Attention normalizers: maps from logits to weights on the visible tokens (docs/gpt2.md,
"Normalizers side by side")."""

import math
from collections.abc import Callable

from ._base import AbstractNormalizer as AbstractNormalizer
from ._base import AbstractPositiveNormalizer as AbstractPositiveNormalizer
from ._base import top_eigenvalue as top_eigenvalue
from ._scalable import ScalableSoftmax as ScalableSoftmax
from ._self_adjusting import MinMaxSelfAdjustingSoftmax as MinMaxSelfAdjustingSoftmax
from ._self_adjusting import SelfAdjustingSoftmax as SelfAdjustingSoftmax
from ._softmax import Softmax as Softmax
from ._sparsemax import Sparsemax as Sparsemax

#: The normalizers `gpt2 bounds --normalizer` knows, by name.
NORMALIZER_NAMES = tuple(c.name for c in (Softmax, Sparsemax, ScalableSoftmax, SelfAdjustingSoftmax,
                                          MinMaxSelfAdjustingSoftmax))


def normalizer_from_name(name: str, *, ssmax_length: int = 32) -> AbstractNormalizer:
    """The normalizer called `name`, applied to logits already divided by the model's
    temperature (so softmax is the model's own attention).

    **Arguments:**

    - `name`: one of [`NORMALIZER_NAMES`][].
    - `ssmax_length`: SSMax uses `s = 1/log(ssmax_length)`, so that it equals the model's
      softmax on contexts of that many tokens.

    **Returns:** the normalizer.
    """
    makers: dict[str, Callable[[], AbstractNormalizer]] = {
              "softmax": lambda: Softmax(1.0), "sparsemax": Sparsemax,
              "ssmax": lambda: ScalableSoftmax(1.0 / math.log(ssmax_length)),
              "sa-softmax": SelfAdjustingSoftmax, "sa-softmax-minmax": MinMaxSelfAdjustingSoftmax}
    if name not in makers:
        raise ValueError(f"unknown normalizer {name!r} (known: {', '.join(NORMALIZER_NAMES)})")
    return makers[name]()
