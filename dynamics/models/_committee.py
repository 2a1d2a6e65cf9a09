"""The soft committee machine / two-layer network in the teacher–student setup
(`docs/committee.md`), in the conventions of Saad & Solla (1995) and Goldt et al. (2019):

- student `φ(x) = Σ_k v_k g(λ_k)`, `λ_k = w_k·x/√D`, K hidden units;
- teacher `y = Σ_m A_m g(ν_m) + σ ζ`, `ν_m = w*_m·x/√D`, M hidden units;
- loss `½(φ − y)²`; SGD `w_k ← w_k − (η/√D) v_k g'(λ_k) Δ x` (autodiff of the loss in `λ_k`)
  and, when the second layer is trained, `v_k ← v_k − (η_v/D) g(λ_k) Δ`, with `Δ = φ − y`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray, Scalar

from .._errors import ConfigError
from .._layout import Layout
from ..units import AbstractUnit, get_unit, unit_class
from ._base import AbstractModel, GramState, ModelWeights, Readout, gaussian_rows, register_model


@dataclasses.dataclass(frozen=True)
class CommitteeSection:
    """`[model]` of `kind = "committee"`."""

    kind: str = "committee"
    K: int = 2
    M: int = 2
    activation: str = "erf"
    noise: float = 0.0
    teacher_second_layer: list | None = None     # A (M numbers); default all ones
    train_second_layer: bool = False

    def validate(self) -> None:
        if self.K < 1:
            raise ConfigError(f"model.K = {self.K}: must be >= 1")
        if self.M < 1:
            raise ConfigError(f"model.M = {self.M}: must be >= 1")
        unit_class(self.activation)           # raises with the list of choices
        if not np.isfinite(self.noise) or self.noise < 0:
            raise ConfigError(f"model.noise = {self.noise}: must be a finite number >= 0")
        if self.teacher_second_layer is not None:
            if any(isinstance(x, bool) for x in self.teacher_second_layer):
                raise ConfigError("model.teacher_second_layer: entries must be numbers")
            try:
                a = np.asarray(self.teacher_second_layer, dtype=np.float64)
            except (TypeError, ValueError):
                raise ConfigError(f"model.teacher_second_layer: must be a list of M = {self.M} "
                                  "numbers") from None
            if a.shape != (self.M,):
                raise ConfigError(f"model.teacher_second_layer: must have M = {self.M} entries "
                                  f"(got shape {list(a.shape)})")
            if not np.all(np.isfinite(a)):
                raise ConfigError("model.teacher_second_layer: entries must be finite")


@dataclasses.dataclass(frozen=True)
class CommitteeTraining:
    """`[training]` of `kind = "committee"`."""

    lr: float = 1.0
    lr_second: float | None = None      # η_v; default lr (and lr_schedule, when set)
    weight_decay: float = 0.0
    batch: int = 1
    init_first_std: float = 1.0         # first-layer weights N(0, s²)
    init_second: float = 1.0            # initial second-layer weights
    t_max: float = 100.0
    lr_schedule: dict | None = None

    def validate(self) -> None:
        for key in ("lr", "weight_decay", "init_first_std"):
            if not getattr(self, key) >= 0:
                raise ConfigError(f"training.{key} = {getattr(self, key)}: must be >= 0")
        if self.lr_second is not None and not self.lr_second >= 0:
            raise ConfigError(f"training.lr_second = {self.lr_second}: must be >= 0")
        if self.batch < 1:
            raise ConfigError(f"training.batch = {self.batch}: must be >= 1")
        if not np.isfinite(self.init_second):
            raise ConfigError(f"training.init_second = {self.init_second}: must be finite")
        if not self.t_max > 0:
            raise ConfigError(f"training.t_max = {self.t_max}: must be > 0")
        if self.lr_schedule is not None:
            from .._schedule import Schedule

            Schedule.from_table("training.lr_schedule", self.lr_schedule)

    @property
    def lr_bias(self) -> float:
        """The step size of the scalar parameters, `η_v` (`StepSizes.lr_bias`)."""
        return self.lr if self.lr_second is None else self.lr_second

    @property
    def lr_bias_schedule(self) -> dict | None:
        """`η_v(t)`: the schedule of `lr` when `lr_second` is not set (η_v follows η)."""
        return self.lr_schedule if self.lr_second is None else None


@register_model
class Committee(AbstractModel):
    """The committee machine of K student and M teacher units of one activation `unit`.

    **Fields:** `K`, `M`, `unit`, `noise` (σ), `teacher_second_layer` (A, shape M),
    `train_second_layer`, `init_first_std` (first-layer weights `N(0, s²)`), `init_second`
    (the initial second-layer weights). Order parameters: `Q = w wᵀ/D` (K×K),
    `R = w w*ᵀ/D` (K×M), `T = w* w*ᵀ/D` (M×M), `v` (K), `A` (M).
    """

    kind: ClassVar[str] = "committee"
    section: ClassVar[type] = CommitteeSection
    training: ClassVar[type] = CommitteeTraining
    layout: ClassVar[Layout] = Layout(names=("Q", "R", "v"), per_unit=("R", "v"),
                                      unit_by_unit=("Q",), alignment=("R", "Q"))
    """Student units are exchangeable; `α_in = R_in/√Q_ii` is the alignment of student i with
    teacher n (`|w*_n|²/D = 1` up to O(D^{-1/2}))."""

    K: int = eqx.field(static=True)
    M: int = eqx.field(static=True)
    unit: AbstractUnit
    sigma: Any = 0.0
    teacher_second_layer: Float[Array, " M"] | None = None
    train_second_layer: bool = eqx.field(static=True, default=False)
    init_first_std: Any = 1.0
    init_second: Any = 1.0

    @classmethod
    def from_config(cls, model: CommitteeSection, training: CommitteeTraining) -> Committee:
        A = (None if model.teacher_second_layer is None
             else jnp.asarray(model.teacher_second_layer, jnp.float64))
        return cls(K=int(model.K), M=int(model.M), unit=get_unit(model.activation),
                   sigma=float(model.noise), teacher_second_layer=A,
                   train_second_layer=bool(model.train_second_layer),
                   init_first_std=float(training.init_first_std),
                   init_second=float(training.init_second))

    @property
    def n_students(self) -> int:
        return self.K

    @property
    def n_teachers(self) -> int:
        return self.M

    @property
    def noise(self) -> Any:
        return self.sigma

    @property
    def trained(self) -> tuple[str, ...]:
        return ("v",) if self.train_second_layer else ()

    @property
    def A(self) -> Float[Array, " M"]:
        if self.teacher_second_layer is None:
            return jnp.ones(self.M)
        return jnp.asarray(self.teacher_second_layer)

    def predict(self, params: Mapping[str, Array], lam: Float[Array, " K"]) -> Scalar:
        return jnp.sum(params["v"] * self.unit(lam))

    def target(self, params: Mapping[str, Array], lam_star: Float[Array, " M"]) -> Scalar:
        return jnp.sum(params["A"] * self.unit(lam_star))

    def hyperparameters(self, training: Any, steps: Any) -> tuple:
        """`training.lr` (η; also η_v when `lr_second` is not set), `training.lr_second`,
        `training.weight_decay`, `training.lr_schedule` (its knot values, when the config
        sets one; it then replaces `training.lr`), `model.noise`, `training.init_first_std`,
        `training.init_second`."""
        out: list[tuple] = []
        if steps.lr_schedule is not None and training.lr_second is None:
            out.append(("training.lr_schedule", "steps",
                        lambda s: (s.lr_schedule.values, s.lr_bias_schedule.values)))
        elif steps.lr_schedule is not None:
            out.append(("training.lr_schedule", "steps", lambda s: s.lr_schedule.values))
        elif training.lr_second is None:
            out.append(("training.lr", "steps", lambda s: (s.lr, s.lr_bias)))
        else:
            out.append(("training.lr", "steps", lambda s: s.lr))
        if training.lr_second is not None:
            out.append(("training.lr_second", "steps", lambda s: s.lr_bias))
        out += [("training.weight_decay", "steps", lambda s: s.weight_decay),
                ("model.noise", "model", lambda m: m.sigma),
                ("training.init_first_std", "model", lambda m: m.init_first_std),
                ("training.init_second", "model", lambda m: m.init_second)]
        return tuple(out)

    def readout(self, params: Mapping[str, Array]) -> Readout:
        return Readout(student=params["v"], teacher=params["A"], unit=self.unit, param="v")

    def named(self, state: GramState) -> dict[str, Array]:
        K = self.K
        g = state.gram
        return {"Q": g[..., :K, :K], "R": g[..., :K, K:], "T": g[..., K:, K:],
                "v": state.params["v"], "A": state.params["A"]}

    def params0(self) -> dict[str, Array]:
        return {"v": jnp.full((self.K,), self.init_second, jnp.float64),
                "A": jnp.asarray(self.A, jnp.float64)}

    def init_weights(self, key: PRNGKeyArray, dim: int, dtype: Any = jnp.float64
                     ) -> ModelWeights:
        """Student `w_k ~ N(0, s² I)`, teacher `w*_m ~ N(0, I)` (so `T = I + O(D^{-1/2})`),
        `v = init_second`."""
        ks, kt = jr.split(key)
        return ModelWeights(students=gaussian_rows(ks, self.K, dim, self.init_first_std, dtype),
                            teachers=gaussian_rows(kt, self.M, dim, 1.0, dtype),
                            params=self.params0())

    def limit_state(self) -> GramState:
        """`Q = s² I`, `R = 0`, `T = I`: the symmetric start, from which no unit specializes."""
        K, M = self.K, self.M
        gram = jnp.zeros((K + M, K + M)).at[:K, :K].set(self.init_first_std**2 * jnp.eye(K))
        return GramState(gram=gram.at[K:, K:].set(jnp.eye(M)), params=self.params0())
