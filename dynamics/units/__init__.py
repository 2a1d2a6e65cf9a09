"""Activations of one variable, `g: R → R`, for models built of hidden units (the committee
machine, single- and multi-index targets). Adding one: a file with an [`AbstractUnit`][]
subclass decorated with [`register_unit`][] (imported below, or anywhere before use).

A unit may know the Gaussian integrals of the committee machine in closed form
(`docs/committee.md#exact-gaussian-integrals`); the exact expectation backend uses them in
place of nodes. The polynomial units ([`PolynomialUnit`][]: the Hermite polynomials `he1` …
`he4` and `square`) have them exactly by Gauss–Hermite rules of sufficient order, and
[`information_exponent`][] reads any function's first non-zero Hermite coefficient."""

from ._base import AbstractUnit as AbstractUnit
from ._base import get_unit as get_unit
from ._base import register_unit as register_unit
from ._base import student_unit as student_unit
from ._base import teacher_unit as teacher_unit
from ._base import unit_class as unit_class
from ._base import unit_names as unit_names
from ._base import unregister_unit as unregister_unit
# registration order is the order `unit_names()` lists them in
from ._erf import Erf as Erf  # noqa: I001
from ._relu import ReLU as ReLU
from ._linear import Linear as Linear
from ._polynomial import He1 as He1
from ._polynomial import He2 as He2
from ._polynomial import He3 as He3
from ._polynomial import He4 as He4
from ._polynomial import Square as Square
from ._smooth import Tanh as Tanh
from ._smooth import Abs as Abs
from ._smooth import Sign as Sign
from ._polynomial import PolynomialUnit as PolynomialUnit
from ._polynomial import hermite as hermite
from ._polynomial import polynomial_degree as polynomial_degree
from ._expansion import hermite_coefficients as hermite_coefficients
from ._expansion import information_exponent as information_exponent
from ._expansion import parity as parity
from ._formula import Formula as Formula
