"""The soft committee machine / two-layer network in the teacher–student setup
(`docs/committee.md`), in the conventions of Saad & Solla (1995) and Goldt et al. (2019):

- student `φ(x) = Σ_k v_k g(λ_k)`, `λ_k = w_k·x/√D`, K hidden units;
- teacher `y = Σ_m A_m g*(ν_m) + σ ζ`, `ν_m = w*_m·x/√D`, M hidden units, of the student's
  activation `g* = g` unless `teacher_activation` names another;
- loss `½(φ − y)²`; SGD `w_k ← w_k − (η/√D) v_k g'(λ_k) Δ x` (autodiff of the loss in `λ_k`)
  and, when the second layer is trained, `v_k ← v_k − (η_v/D) g(λ_k) Δ`, with `Δ = φ − y`.
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


@register_model
class Committee(AbstractModel):
    """The committee machine of K student and M teacher units of one activation `unit`.

    Order parameters: `Q = w wᵀ/D` (K×K), `R = w w*ᵀ/D` (K×M), `T = w* w*ᵀ/D` (M×M), `v` (K),
    `A` (M).
    """

    kind: ClassVar[str] = "committee"
    rows: ClassVar[Rows] = Rows(students="K", teachers="M", student_std="init_first_std")
    layout: ClassVar[Layout] = Layout(names=("Q", "R", "v"), per_unit=("R", "v"),
                                      unit_by_unit=("Q",), alignment=("R", "Q"))
    """Student units are exchangeable; `α_in = R_in/√Q_ii` is the alignment of student i with
    teacher n (`|w*_n|²/D = 1` up to O(D^{-1/2}))."""
    lr_bias_key: ClassVar[str] = "lr_second"

    K: int = param(2, ge=1, help="student units")
    M: int = param(2, ge=1, help="teacher units")
    unit: AbstractUnit = param("erf", key="activation", convert=student_unit, static=False,
                               help="g, the student units' activation")
    teacher_unit: AbstractUnit | None = param(
        None, key="teacher_activation", type=str, convert=teacher_unit, static=False,
        help="g*, the teacher units' activation (default: the student's)")
    noise: Any = param(0.0, ge=0, help="σ, the label noise")
    teacher_second_layer: Float[Array, " M"] | None = param(
        None, type=list, length="M", help="A, the teacher's second layer (default all ones)")
    train_second_layer: bool = param(False, help="train the student's second layer v")
    init_first_std: Any = param(1.0, section="training", ge=0,
                                help="first-layer weights N(0, s²) at the start")
    init_second: Any = param(1.0, section="training",
                             help="the second-layer weights at the start")

    @property
    def sigma(self) -> Any:
        """σ (the field `noise`)."""
        return self.noise

    @property
    def trained(self) -> tuple[str, ...]:
        return ("v",) if self.train_second_layer else ()

    @property
    def teacher_g(self) -> AbstractUnit:
        """`g*`, the teacher's activation (`teacher_activation`, else the student's)."""
        return self.unit if self.teacher_unit is None else self.teacher_unit

    @property
    def A(self) -> Float[Array, " M"]:
        if self.teacher_second_layer is None:
            return jnp.ones(self.M)
        return jnp.asarray(self.teacher_second_layer)

    def predict(self, params: Mapping[str, Array], lam: Float[Array, " K"]) -> Scalar:
        return jnp.sum(params["v"] * self.unit(lam))

    def target(self, params: Mapping[str, Array], lam_star: Float[Array, " M"]) -> Scalar:
        return jnp.sum(params["A"] * self.teacher_g(lam_star))

    def readout(self, params: Mapping[str, Array]) -> Readout | None:
        if type(self.teacher_g) is not type(self.unit):
            return None                 # two activations: no closed forms of one unit
        return Readout(student=params["v"], teacher=params["A"], unit=self.unit, param="v")

    def polynomial_degree(self) -> int | None:
        return polynomial_degree(self.unit, self.teacher_g)

    def params0(self) -> dict[str, Array]:
        return {"v": jnp.full((self.K,), self.init_second, jnp.float64),
                "A": jnp.asarray(self.A, jnp.float64)}
