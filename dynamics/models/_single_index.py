"""The single-index model (`docs/index-models.md`): one student direction learning one teacher
direction through activations of one field each.

- student `ŷ = a g(λ)`, `λ = w·x/√D`, with the second-layer weight `a` fixed or trained;
- teacher `y = g*(ν) + σ ζ`, `ν = w*·x/√D`, with `g* = g` unless `teacher_activation` names
  another unit;
- loss: the square loss `½(ŷ − y)²`, or the correlation loss `−ŷ y`;
- the student's norm free, or kept on the sphere `|w|² = D` (`spherical`, the setting of Ben
  Arous, Gheissari & Jagannath).

Its symmetries follow from the units' parities: an even teacher makes `ν → −ν` (`R → −R`) a
symmetry, so `R = 0` is an invariant subspace that SGD leaves only through its fluctuations; an
even student makes `λ → −λ` one, and an odd student `(λ, a) → (−λ, −a)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax.numpy as jnp
from jaxtyping import Array, Float, Scalar

from .._layout import Layout
from ..units import AbstractUnit, polynomial_degree, student_unit, teacher_unit
from ._base import Readout, register_model
from ._model import AbstractModel
from ._params import Rows, param
from ._symmetry import AbstractSymmetry, SignFlip


@register_model
class SingleIndex(AbstractModel):
    """A single-index student `ŷ = a g(λ)` and teacher `y = g*(ν) + σ ζ`.

    Order parameters: `Q = |w|²/D`, `R = w·w*/D`, `T = |w*|²/D` (1 up to O(D^{-1/2})) and `a`.
    """

    kind: ClassVar[str] = "single_index"
    rows: ClassVar[Rows] = Rows(students=1, teachers=1, student_std="init_first_std")
    layout: ClassVar[Layout] = Layout(names=("Q", "R", "a"), per_unit=("R", "a"),
                                      unit_by_unit=("Q",), alignment=("R", "Q"))
    lr_bias_key: ClassVar[str] = "lr_second"
    lr_default: ClassVar[float] = 0.1
    """The default η: at η = 1 the default model (`he2` units, square loss, free norm)
    diverges, and at η = 0.2 too, since the η² term (the variance of the square loss's gradient,
    a degree-6 polynomial in the fields) outgrows the drift; at η = 0.1 it learns the target."""

    unit: AbstractUnit = param("he2", key="activation", convert=student_unit, static=False,
                               help="g, the student's activation")
    teacher_unit: AbstractUnit | None = param(
        None, key="teacher_activation", type=str, convert=teacher_unit, static=False,
        help="g*, the teacher's activation (default: the student's)")
    loss_kind: str = param("square", key="loss", choices=("square", "correlation"),
                           help="the per-sample loss: square ½(ŷ − y)² or correlation −ŷ y")
    noise: Any = param(0.0, ge=0, help="σ, the label noise")
    train_second_layer: bool = param(False, help="train the second-layer weight a")
    on_sphere: bool = param(False, key="spherical",
                            help="keep the student on the sphere |w|² = D (Q = 1), restored "
                                 "after every step")
    init_first_std: Any = param(1.0, section="training", ge=0,
                                help="the student's weights N(0, s²) at the start")
    init_second: Any = param(1.0, section="training", help="a, at the start")

    @property
    def teacher_g(self) -> AbstractUnit:
        """`g*`, the teacher's activation (`teacher_activation`, else the student's)."""
        return self.unit if self.teacher_unit is None else self.teacher_unit

    @property
    def spherical(self) -> bool:
        return self.on_sphere

    @property
    def trained(self) -> tuple[str, ...]:
        return ("a",) if self.train_second_layer else ()

    def params0(self) -> dict[str, Array]:
        return {"a": jnp.full((1,), self.init_second, jnp.float64)}

    def predict(self, params: Mapping[str, Array], lam: Float[Array, " 1"]) -> Scalar:
        return params["a"][0] * self.unit(lam[0])

    def target(self, params: Mapping[str, Array], lam_star: Float[Array, " 1"]) -> Scalar:
        return self.teacher_g(lam_star[0])

    def loss(self, params: Mapping[str, Array], lam: Float[Array, " 1"], y: Scalar) -> Scalar:
        if self.loss_kind == "correlation":
            return -self.predict(params, lam) * y
        return super().loss(params, lam, y)

    def readout(self, params: Mapping[str, Array]) -> Readout | None:
        if self.loss_kind != "square" or type(self.teacher_g) is not type(self.unit):
            return None                 # the closed forms are those of the square loss
        return Readout(student=params["a"], teacher=jnp.ones(1), unit=self.unit, param="a")

    def polynomial_degree(self) -> int | None:
        return polynomial_degree(self.unit, self.teacher_g)

    def symmetries(self) -> tuple[AbstractSymmetry, ...]:
        out: list[AbstractSymmetry] = []
        if self.teacher_g.parity() == 1:
            out.append(SignFlip(teacher=0))
        student = self.unit.parity()
        if student == 1:
            out.append(SignFlip(student=0))
        elif student == -1:
            out.append(SignFlip(student=0, params=("a",)))
        return tuple(out)
