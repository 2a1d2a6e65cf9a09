"""Attention activations. Adding one: a file with an [`AbstractActivation`][] subclass decorated
with [`register_activation`][] (imported below, or anywhere before use)."""

from ._base import AbstractActivation as AbstractActivation
from ._base import SymbolicDefinition as SymbolicDefinition
from ._base import activation_class as activation_class
from ._base import activation_color as activation_color
from ._base import activation_names as activation_names
from ._base import get_activation as get_activation
from ._base import register_activation as register_activation
from ._base import unregister_activation as unregister_activation
# registration order is the order of CLI choices, figures and test parametrizations
from ._softmax import Softmax as Softmax  # noqa: I001
from ._softmax1 import Softmax1 as Softmax1
from ._bayes_softmax import BayesSoftmax as BayesSoftmax
