"""The multi-index model (`docs/index-models.md`): a committee of K student units learning a
target that is any function of M teacher fields, written as a formula in the config.

- student `ŷ = Σ_k v_k g(λ_k)`, `λ_k = w_k·x/√D`;
- teacher `y = f(ν_1, …, ν_M) + σ ζ`, `ν_m = w*_m·x/√D`, with `f` the formula `teacher`
  ([`headflow.dynamics.units.Formula`][]), e.g. the two-step staircase
  `"he1(nu1) + he1(nu1)*he1(nu2)"`;
- loss `½(ŷ − y)²`.

The information exponent of each direction is computed from the formula
([`Formula.information_exponents`][headflow.dynamics.units.Formula.information_exponents]), not
declared: for the staircase, 1 along `ν_1` and none along `ν_2`, which is learnable only once
`ν_1` is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax.numpy as jnp
from jaxtyping import Array, Float, Scalar

from .._layout import Layout
from ..units import AbstractUnit, Formula, polynomial_degree, student_unit
from ._base import register_model
from ._model import AbstractModel
from ._params import Rows, param


def _formula(text: str) -> Formula:
    return Formula.parse(text)


@register_model
class MultiIndex(AbstractModel):
    """A committee of `K` units learning `y = f(ν_1, …, ν_M) + σ ζ`, `M` the number of fields
    the formula names.

    Order parameters: `Q` (K×K), `R` (K×M), `T` (M×M), `v` (K)."""

    kind: ClassVar[str] = "multi_index"
    rows: ClassVar[Rows] = Rows(students="K", teachers="M", student_std="init_first_std")
    layout: ClassVar[Layout] = Layout(names=("Q", "R", "v"), per_unit=("R", "v"),
                                      unit_by_unit=("Q",), alignment=("R", "Q"))
    lr_bias_key: ClassVar[str] = "lr_second"

    K: int = param(2, ge=1, help="student units")
    teacher: Formula = param("he1(nu1) + he1(nu1)*he1(nu2)", convert=_formula, type=str,
                             static=True, help="f, the target as a formula of the fields "
                                               "nu1, nu2, … (units, + − * / **, numbers)")
    unit: AbstractUnit = param("erf", key="activation", convert=student_unit, static=False,
                               help="g, the student units' activation")
    noise: Any = param(0.0, ge=0, help="σ, the label noise")
    train_second_layer: bool = param(False, help="train the student's second layer v")
    init_first_std: Any = param(1.0, section="training", ge=0,
                                help="first-layer weights N(0, s²) at the start")
    init_second: Any = param(1.0, section="training",
                             help="the second-layer weights at the start")

    @property
    def M(self) -> int:
        """The teacher's directions: the fields the formula names."""
        return self.teacher.n_fields

    @property
    def trained(self) -> tuple[str, ...]:
        return ("v",) if self.train_second_layer else ()

    def params0(self) -> dict[str, Array]:
        return {"v": jnp.full((self.K,), self.init_second, jnp.float64)}

    def predict(self, params: Mapping[str, Array], lam: Float[Array, " K"]) -> Scalar:
        return jnp.sum(params["v"] * self.unit(lam))

    def target(self, params: Mapping[str, Array], lam_star: Float[Array, " M"]) -> Scalar:
        return self.teacher(lam_star)

    def polynomial_degree(self) -> int | None:
        f, g = self.teacher.polynomial_degree(), polynomial_degree(self.unit)
        return None if f is None or g is None else max(f, g)
