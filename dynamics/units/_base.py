"""The unit-activation family: `g(x)` of one local field, and the Gaussian integrals of products
of `g`, `g'` and the identity that a committee's expectations reduce to."""

from __future__ import annotations

import abc
from typing import ClassVar, TypeVar

import equinox as eqx
from jaxtyping import Array, Float

from .._errors import ConfigError
from .._registry import Registry
from ._expansion import information_exponent, parity
from ._tables import grid, pair_quadruples, sub


class AbstractUnit(eqx.Module):
    """An activation of one variable, applied elementwise.

    A concrete unit sets `name` (its config value, `model.activation`) and `label` (its name in
    figures), implements `__call__` elementwise (the engine differentiates it with autodiff:
    write it so that its derivative is the one meant where it has a kink), and may override
    the closed-form Gaussian integrals `i2`, `i3`, `i4`, `j2` (`docs/committee.md`), each taking
    the covariance of the jointly Gaussian, zero-mean fields it names (last two axes) and
    returning the integral; a unit that gives all four sets `exact = True`, and the exact
    expectation backend then replaces nodes by them:

    | integral | definition | covariance |
    |---|---|---|
    | `i2(C)` | `E[g(a) g(b)]` | 2×2 |
    | `i3(C)` | `E[g'(a) b g(c)]` | 3×3 |
    | `i4(C)` | `E[g'(a) g'(b) g(c) g(d)]` | 4×4 |
    | `j2(C)` | `E[g'(a) g'(b)]` | 2×2 |
    """

    name: eqx.AbstractClassVar[str]
    label: eqx.AbstractClassVar[str]
    exact: eqx.AbstractClassVar[bool]
    teacher_only: ClassVar[bool] = False
    """A unit a student cannot learn with, because its derivative vanishes almost everywhere
    (`sign`): it may be a teacher's activation only."""

    @abc.abstractmethod
    def __call__(self, x: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        """`g(x)`, elementwise."""

    def information_exponent(self) -> int | None:
        """The index of the first non-zero Hermite coefficient of `g` beyond the constant
        ([`headflow.dynamics.units.information_exponent`][], computed from `g` itself)."""
        return information_exponent(self)

    def parity(self) -> int:
        """`+1` when `g` is even, `−1` when it is odd, `0` otherwise: `g(−x)` against `g(x)` on
        the symmetric Gauss–Hermite nodes of the expansion, to round-off. An even unit makes
        its field's sign flip a symmetry of the model that reads it."""
        return parity(self)

    def i2(self, C: Float[Array, "*batch 2 2"]) -> Float[Array, "*batch"]:
        raise NotImplementedError(f"unit {self.name!r} has no closed-form I2")

    def i3(self, C: Float[Array, "*batch 3 3"]) -> Float[Array, "*batch"]:
        raise NotImplementedError(f"unit {self.name!r} has no closed-form I3")

    def i4(self, C: Float[Array, "*batch 4 4"]) -> Float[Array, "*batch"]:
        raise NotImplementedError(f"unit {self.name!r} has no closed-form I4")

    def j2(self, C: Float[Array, "*batch 2 2"]) -> Float[Array, "*batch"]:
        raise NotImplementedError(f"unit {self.name!r} has no closed-form J2")

    def i3_table(self, C: Float[Array, "P P"], S: int) -> Float[Array, "S P P"]:
        """`I3(i, j, a)` for every student field `i < S` and all fields `j`, `a`, from the
        Gram matrix `C` of all of them. The default applies `i3` to each 3×3 covariance; a
        unit may override it to compute the factors that depend on fewer indices once."""
        P = C.shape[-1]
        return self.i3(sub(C, grid(S, P, P)))

    def i4_pairs(self, C: Float[Array, "P P"], S: int) -> Float[Array, "SS PP"]:
        """`I4(i, k, a, b)`, symmetric in `(i, k)` and in `(a, b)`, once for every unordered
        pair `{i, k}` of student fields (`i ≤ k < S`) and `{a, b}` of all fields, both in
        row-major order: `(S(S+1)/2, P(P+1)/2)`. The default applies `i4` to each 4×4
        covariance; a unit may override it to compute the factors that depend on fewer indices
        once."""
        return self.i4(sub(C, pair_quadruples(S, C.shape[-1])))


_REGISTRY: Registry[type[AbstractUnit]] = Registry("unit activation", "name")

_U = TypeVar("_U", bound=type[AbstractUnit])


def register_unit(cls: _U) -> _U:
    """Class decorator: make `cls` available under `cls.name` as a `model.activation` of the
    models built of units."""
    _REGISTRY.register(cls)
    return cls


def unregister_unit(name: str) -> None:
    """Remove a registered unit (tests that register temporary ones)."""
    _REGISTRY.unregister(name)


def unit_names() -> tuple[str, ...]:
    """The registered units, in registration order."""
    return _REGISTRY.names()


def unit_class(name: str) -> type[AbstractUnit]:
    """The class registered under `name`; a [`ConfigError`][] naming `model.activation`
    otherwise."""
    return _REGISTRY.get(name, lambda msg: ConfigError(f"model.activation = {msg}"))


def get_unit(name: str) -> AbstractUnit:
    """An instance of the unit registered under `name` (e.g. `"erf"`)."""
    return unit_class(name)()


def student_unit(name: str, key: str = "model.activation") -> AbstractUnit:
    """The unit of a student's activation: [`get_unit`][], refusing a teacher-only unit in
    one line that names the config `key`."""
    cls = _REGISTRY.get(name, lambda msg: ConfigError(f"{key} = {msg}"))
    if cls.teacher_only:
        raise ConfigError(f"{key} = {name!r}: a teacher-only unit (its derivative vanishes "
                          "almost everywhere, so a student's gradient would be zero); use it as "
                          "the teacher's activation")
    return cls()


def teacher_unit(name: str, key: str = "model.teacher_activation") -> AbstractUnit:
    """The unit of a teacher's activation (any registered unit), with errors naming `key`."""
    return _REGISTRY.get(name, lambda msg: ConfigError(f"{key} = {msg}"))()
