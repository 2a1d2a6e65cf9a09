"""Activations of one variable, `g: R → R`, for models built of hidden units (the committee
machine, single- and multi-index targets). Adding one: a file with an [`AbstractUnit`][]
subclass decorated with [`register_unit`][] (imported below, or anywhere before use).

A unit may know the Gaussian integrals of the committee machine in closed form
(`docs/committee.md#exact-gaussian-integrals`); the exact expectation backend uses them in
place of nodes."""

from ._base import AbstractUnit as AbstractUnit
from ._base import get_unit as get_unit
from ._base import register_unit as register_unit
from ._base import unit_class as unit_class
from ._base import unit_names as unit_names
from ._base import unregister_unit as unregister_unit
# registration order is the order `unit_names()` lists them in
from ._erf import Erf as Erf  # noqa: I001
from ._relu import ReLU as ReLU
from ._linear import Linear as Linear
