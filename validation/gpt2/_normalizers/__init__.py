"""Attention normalizers: maps from logits to weights on the visible tokens (spec §1)."""

from ._base import AbstractNormalizer as AbstractNormalizer
from ._base import AbstractPositiveNormalizer as AbstractPositiveNormalizer
from ._scalable import ScalableSoftmax as ScalableSoftmax
from ._self_adjusting import SelfAdjustingSoftmax as SelfAdjustingSoftmax
from ._softmax import Softmax as Softmax
from ._sparsemax import Sparsemax as Sparsemax
