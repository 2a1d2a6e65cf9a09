"""Attention activations. Adding one: a file with an [`AbstractActivation`][] subclass decorated
with [`register_activation`][], and its import below."""

from ._base import AbstractActivation as AbstractActivation
from ._base import activation_names as activation_names
from ._base import get_activation as get_activation
from ._base import register_activation as register_activation
from ._bayes_softmax import BayesSoftmax as BayesSoftmax
from ._softmax import Softmax as Softmax
from ._softmax1 import Softmax1 as Softmax1
