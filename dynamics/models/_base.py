"""The model family (`docs/models.md`): what a model of online learning in high dimensions
declares, so that the generic engine (vector fields, ODE, SDE, weight- and overlap-space SGD,
risk) runs it.

A model is a student of `S` vectors `w_i ∈ R^D` and a teacher of `T` vectors `w*_n`, read
through the local fields `λ = [w; w*] x/√D` of a standard Gaussian input `x`, plus scalar
parameters (second-layer weights, biases). The fields of one input are exactly Gaussian with
covariance the Gram matrix `Ω = [w; w*][w; w*]ᵀ/D` at any D, so `(Ω, params)` ([`GramState`][])
is the state of the theory, and the model's predictor, evaluated on the fields, is the only
model-specific code the engine differentiates.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, TypeVar

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray, Scalar

from .._errors import ConfigError, HeadflowError
from .._layout import Layout
from .._registry import Registry
from ..units import AbstractUnit


class GramState(eqx.Module):
    """The order parameters of a model: the Gram matrix `gram` of the student rows (first `S`)
    and the teacher rows (last `T`), divided by D, and the scalar parameters `params` (a dict
    of arrays, e.g. second-layer weights). Leaves may carry leading batch axes (seeds, times,
    paths); the model's [`AbstractModel.named`][] gives the named view (`Q`, `R`, `T`, ...)."""

    gram: Float[Array, "*batch P P"]
    params: dict[str, Float[Array, "*batch _n"]]


class ModelWeights(eqx.Module):
    """Finite-D weights of a model: `students (S, D)`, `teachers (T, D)` and the scalar
    `params`."""

    students: Float[Array, "S D"]
    teachers: Float[Array, "T D"]
    params: dict[str, Float[Array, " _n"]]

    @property
    def D(self) -> int:
        return self.students.shape[-1]

    def state(self) -> GramState:
        """The order parameters of these weights (float64)."""
        W = jnp.concatenate([self.students, self.teachers]).astype(jnp.float64)
        return GramState(gram=W @ W.T / self.D,
                         params={k: jnp.asarray(v, jnp.float64) for k, v in self.params.items()})


class Readout(eqx.Module):
    """The structure `φ = Σ_i c_i g(λ_i)` (student) and `y* = Σ_n c*_n g(λ*_n)` (teacher) of one
    unit activation `g`, under the squared loss: what the exact expectation backend needs
    (`docs/committee.md#exact-gaussian-integrals`). `param` names the scalar parameter that
    holds `c` (None: `c` is not a parameter)."""

    student: Float[Array, " S"]
    teacher: Float[Array, " T"]
    unit: AbstractUnit
    param: str | None = eqx.field(static=True, default=None)


class AbstractModel(eqx.Module):
    """A model of the family. A concrete model is one file: a subclass that sets `kind` (its
    `[model] kind`), implements the abstract methods below, and is decorated with
    [`register_model`][]; the engine never reads anything else of it.

    **Declares:**

    - `n_students`, `n_teachers`: the number of student and teacher vectors;
    - `noise`: the standard deviation `σ` of the label noise, `y = target + σ ζ`;
    - `trained`: the names of the scalar parameters SGD moves (step `η_p/D`, `StepSizes.lr_bias`);
    - `predict(params, λ)` and `target(params, λ*)`: the student's and the teacher's
      outputs on the fields; `loss` (default `½(ŷ − y)²`);
    - `named(state)`: the order parameters by name, for output files and figures;
    - `init_weights(key, dim)`: a random initialization at dimension D (teacher included);
    - `limit_state()`: the D → ∞ limit of that initialization;
    - `readout(params)` (optional): the [`Readout`][] structure, for exact expectations;
    - `layout`: how its named order parameters are laid out ([`dynamics.Layout`][]), for the
      analyses that compare runs.
    """

    kind: eqx.AbstractClassVar[str]
    layout: eqx.AbstractClassVar[Layout]

    @property
    @abc.abstractmethod
    def n_students(self) -> int: ...

    @property
    @abc.abstractmethod
    def n_teachers(self) -> int: ...

    @property
    @abc.abstractmethod
    def noise(self) -> Any: ...

    @property
    @abc.abstractmethod
    def trained(self) -> tuple[str, ...]: ...

    @abc.abstractmethod
    def predict(self, params: Mapping[str, Array], lam: Float[Array, " S"]) -> Scalar:
        """The student's output on its fields `λ`."""

    @abc.abstractmethod
    def target(self, params: Mapping[str, Array], lam_star: Float[Array, " T"]) -> Scalar:
        """The teacher's noiseless output on its fields `λ*`."""

    def loss(self, params: Mapping[str, Array], lam: Float[Array, " S"], y: Scalar) -> Scalar:
        """Per-sample loss, `½(ŷ − y)²`."""
        return 0.5 * (self.predict(params, lam) - y) ** 2

    @abc.abstractmethod
    def named(self, state: GramState) -> dict[str, Array]:
        """The order parameters by name (any leading batch axes kept)."""

    @abc.abstractmethod
    def init_weights(self, key: PRNGKeyArray, dim: int, dtype: Any = jnp.float64
                     ) -> ModelWeights:
        """A random student and teacher at dimension `dim`."""

    @abc.abstractmethod
    def limit_state(self) -> GramState:
        """The D → ∞ limit of [`init_weights`][]'s order parameters (a symmetric start)."""

    def hyperparameters(self, training: Any, steps: Any) -> tuple:
        """The differentiable hyperparameters: `(config key, "model" | "steps", selector)`
        triples, the selector picking the leaf (or a tuple of leaves set together) in the model
        or in the step sizes `steps` (`eqx.tree_at` style); `training` is the config's
        `[training]` section. Default: none."""
        del training, steps
        return ()

    def readout(self, params: Mapping[str, Array]) -> Readout | None:
        """The readout structure, or None when the model has none (no exact backend)."""
        del params
        return None

    # -- generic, written once over the declarations above ------------------------------------
    @property
    def n_rows(self) -> int:
        """`P = S + T`, the rows of the Gram matrix."""
        return self.n_students + self.n_teachers

    def initial_state(self, key: PRNGKeyArray, dim: int) -> GramState:
        """The order parameters of one random initialization at `dim` (exact finite-D law)."""
        return self.init_weights(key, dim, jnp.float64).state()

    def check_state(self, state: Any, *, what: str = "initial state",
                    tol: float = 1e-9) -> None:
        """Raise a one-line error unless `state` fits this model (a `GramState` of the right
        shapes and parameter names) and its Gram matrix is positive semi-definite (a host
        check, in numpy)."""
        if not isinstance(state, GramState):
            raise HeadflowError(f"{what}: the {self.kind} model's state is a GramState, not a "
                                f"{type(state).__name__}")
        P = self.n_rows
        gram = np.asarray(state.gram, dtype=np.float64)
        if gram.shape != (P, P):
            raise HeadflowError(f"{what}: the Gram matrix has shape {gram.shape}, expected "
                                f"{(P, P)} ({self.n_students} student and {self.n_teachers} "
                                "teacher rows)")
        want = set(self.limit_state().params)
        if set(state.params) != want:
            raise HeadflowError(f"{what}: parameters {sorted(state.params)}, expected "
                                f"{sorted(want)}")
        finite = bool(np.all(np.isfinite(gram)))
        lam = float(np.linalg.eigvalsh(0.5 * (gram + gram.T))[0]) if finite else float("nan")
        scale = max(1.0, float(np.max(np.abs(gram)))) if finite else 1.0
        if not np.isfinite(lam) or lam < -tol * scale:
            raise HeadflowError(f"{what}: not a valid Gram matrix (smallest eigenvalue "
                                f"{lam:.3g} < 0)")


def gaussian_rows(key: PRNGKeyArray, n: int, dim: int, std: Any, dtype: Any) -> Array:
    """`n` vectors of dimension `dim` with i.i.d. `N(0, std²)` entries."""
    return std * jr.normal(key, (n, dim), dtype=dtype)


_REGISTRY: Registry[type[AbstractModel]] = Registry("model", "kind")

_M = TypeVar("_M", bound=type[AbstractModel])


def register_model(cls: _M) -> _M:
    """Class decorator: make `cls` available as `[model] kind = cls.kind`."""
    _REGISTRY.register(cls)
    return cls


def unregister_model(kind: str) -> None:
    """Remove a registered model (tests that register temporary ones)."""
    _REGISTRY.unregister(kind)


def model_kinds() -> tuple[str, ...]:
    """The registered model kinds (the attention model, `"attention"`, is built in)."""
    return ("attention", *_REGISTRY.names())


def model_class(kind: str) -> type[AbstractModel]:
    """The class registered as `kind`; a [`ConfigError`][] naming `model.kind` otherwise."""
    if kind not in _REGISTRY:
        raise ConfigError(f"model.kind = {kind!r}: unknown model; choose one of "
                          f"{', '.join(map(repr, model_kinds()))}")
    return _REGISTRY.get(kind, ConfigError)

