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
import functools
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray, Scalar

from .._errors import ConfigError, HeadflowError
from .._layout import Layout
from .._registry import Registry
from .._wishart import bartlett, chi_square
from ..measures import best_alignment, head_spread
from ..units import AbstractUnit
from ._loading import load_code_model, load_plugin, plugin_entry_points, split_kind
from ._params import (Hyperparameter, Rows, config_key, describe, from_tables, model_field,
                      model_table, params_of, training_table)
from ._symmetry import AbstractSymmetry


def _value_key(model: Any) -> Any:
    """A hashable stand-in for a model's value (its class, tree structure and leaves), or None
    when a leaf is an array or a tracer (no identity by value to rely on)."""
    leaves, treedef = jax.tree.flatten(model)
    if not all(type(x) in (bool, int, float, str) for x in leaves):
        return None
    try:
        key = (type(model), treedef, tuple(leaves))
        hash(key)
    except TypeError:
        return None
    return key


_R = TypeVar("_R")


def by_value(fn: Callable[[Any], _R]) -> Callable[[Any], _R]:
    """`fn(model)` remembered by the model's value: for host-side questions about a model
    (its checks, whether it has closed forms) that configs ask again for every copy, such as
    the points of a grid. A model with array leaves is not remembered; an exception is not
    either (it is raised again)."""
    cache: dict = {}

    @functools.wraps(fn)
    def wrapped(model: Any) -> _R:
        key = _value_key(model)
        if key is None:
            return fn(model)
        if key not in cache:
            if len(cache) >= 4096:
                cache.clear()
            cache[key] = fn(model)
        return cache[key]

    return wrapped


class GramState(eqx.Module):
    """The order parameters of a model: the Gram matrix `gram` of the student rows (first `S`)
    and the teacher rows (last `T`), divided by D, and the scalar parameters `params` (a dict
    of arrays, e.g. second-layer weights). Leaves may carry leading batch axes (seeds, times,
    paths); the model's [`named`][headflow.dynamics.models.ModelBase.named] gives the named
    view (`Q`, `R`, `T`, ...)."""

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


class ModelBase(eqx.Module):
    """The mathematics of a model of the family: its predictor, its Gram layout and its
    declarations, with their generic defaults. [`headflow.dynamics.models.AbstractModel`][] adds
    what the engine computes from them (vector field, diffusion, risk, starts, learning curves)
    and documents the whole interface; the engine's lower layers (fields, expectations,
    increments) read only this part, so they import no integrator."""

    kind: eqx.AbstractClassVar[str]
    rows: ClassVar[Rows | None] = None
    layout: ClassVar[Layout] = Layout(names=("Q", "R"), per_unit=("R",), unit_by_unit=("Q",),
                                      alignment=("R", "Q"))
    t_max: ClassVar[float] = 100.0
    """The default `training.t_max`."""
    lr_default: ClassVar[float] = 1.0
    """The default `training.lr` (η)."""
    extra_sections: ClassVar[tuple[str, ...]] = ()
    """Config sections the model reads beyond the engine's (the attention model: `prior`)."""
    lr_bias_key: ClassVar[str] = "lr_params"
    """The `[training]` key of the scalar parameters' step size `η_p`; the key (and its
    schedule, `<lr_bias_key>_schedule`) exists only for a model that defines `trained`."""
    lr_bias_default: ClassVar[float | None] = None
    """The default of that key (None: the scalar parameters step with `lr`)."""

    @abc.abstractmethod
    def predict(self, params: Mapping[str, Array], lam: Float[Array, " S"]) -> Scalar:
        """The student's output on its fields `λ`."""

    @abc.abstractmethod
    def target(self, params: Mapping[str, Array], lam_star: Float[Array, " T"]) -> Scalar:
        """The teacher's noiseless output on its fields `λ*`."""

    def loss(self, params: Mapping[str, Array], lam: Float[Array, " S"], y: Scalar) -> Scalar:
        """Per-sample loss, `½(ŷ − y)²`."""
        return 0.5 * (self.predict(params, lam) - y) ** 2

    # -- derived from `rows` ------------------------------------------------------------------
    def _rows(self) -> Rows:
        rows = type(self).rows
        if rows is None:
            raise HeadflowError(f"model {type(self).__name__}: declare its Gram layout, "
                                "`rows = Rows(students=..., teachers=...)`, or override "
                                "n_students, n_teachers, named, init_weights and limit_state")
        return rows

    @property
    def n_students(self) -> int:
        """The number of student rows (`rows.students`)."""
        return int(Rows.value(self, self._rows().students))

    @property
    def n_teachers(self) -> int:
        """The number of teacher rows (`rows.teachers`)."""
        return int(Rows.value(self, self._rows().teachers))

    @property
    def noise(self) -> Any:
        """The label noise's standard deviation (default 0)."""
        return 0.0

    @property
    def trained(self) -> tuple[str, ...]:
        """The scalar parameters SGD moves (default: none)."""
        return ()

    @property
    def spherical(self) -> bool:
        """Whether the students live on the sphere `|w_i|² = D` (`Q_ii = 1`), restored after
        every SGD step by `w_i ← √D w_i/|w_i|` (projected online SGD). The engine makes the
        projection exact in both simulators and expands it to first order in `1/D` in the
        increment whose mean and covariance the ODE and SDE use ([`assemble`][]). Default:
        False (free norms)."""
        return False

    def params0(self) -> dict[str, Array]:
        """The scalar parameters at the start, by name (default: none)."""
        return {}

    def named(self, state: GramState) -> dict[str, Array]:
        """The order parameters by name (any leading batch axes kept): `Q` (students ×
        students), `R` (students × teachers), `T` (teachers × teachers), then the scalar
        parameters."""
        S = self.n_students
        g = state.gram
        return {"Q": g[..., :S, :S], "R": g[..., :S, S:], "T": g[..., S:, S:],
                **state.params}

    def init_weights(self, key: PRNGKeyArray, dim: int, dtype: Any = jnp.float64
                     ) -> ModelWeights:
        """A random student and teacher at dimension `dim`: `w_i ~ N(0, s² I)`,
        `w*_n ~ N(0, s*² I)` (the scales of `rows`; a [`spherical`][] model's students
        rescaled to `|w_i|² = D`), and the scalar parameters `params0()`."""
        rows = self._rows()
        ks, kt = jr.split(key)
        students = gaussian_rows(ks, self.n_students, dim, Rows.value(self, rows.student_std),
                                 dtype)
        if self.spherical:                  # on the sphere: a uniform direction, |w_i|² = D
            students = sphere_rows(students)
        return ModelWeights(
            students=students,
            teachers=gaussian_rows(kt, self.n_teachers, dim,
                                   Rows.value(self, rows.teacher_std), dtype),
            params=self.params0())

    def with_named(self, state: GramState, values: Mapping[str, Any]) -> GramState:
        """`state` with some order parameters set by name (the inverse of [`named`][]): `Q`,
        `R` (and so its transpose), `T`, or a scalar parameter; the others kept. A one-line
        [`ConfigError`][] for an unknown name or a wrong shape (the state is not checked for
        positive semi-definiteness here: [`check_state`][] does)."""
        S = self.n_students
        have = self.named(state)
        gram, params = state.gram, dict(state.params)
        for name, value in values.items():
            if name not in have:
                raise ConfigError(f"ode.init.{name}: not an order parameter of this model "
                                  f"(it has {', '.join(have)})")
            want = tuple(np.shape(have[name]))
            arr = jnp.asarray(value, jnp.float64)
            if arr.shape != want:
                raise ConfigError(f"ode.init.{name}: shape {list(arr.shape)}, expected "
                                  f"{list(want)}")
            if name == "Q":
                gram = gram.at[:S, :S].set(arr)
            elif name == "R":
                gram = gram.at[:S, S:].set(arr).at[S:, :S].set(arr.T)
            elif name == "T":
                gram = gram.at[S:, S:].set(arr)
            elif name in params:
                params[name] = arr
            else:
                raise ConfigError(f"ode.init.{name}: this model's order parameters cannot be "
                                  "set by name (it overrides `named`; override `with_named` "
                                  "too)")
        return GramState(gram=gram, params=params)

    def limit_state(self) -> GramState:
        """The D → ∞ limit of [`init_weights`][]'s order parameters: `Q = s² I` (`I` for a
        [`spherical`][] model), `R = 0`, `T = s*² I` (a symmetric start)."""
        rows = self._rows()
        S, T = self.n_students, self.n_teachers
        s = 1.0 if self.spherical else Rows.value(self, rows.student_std)
        st = Rows.value(self, rows.teacher_std)
        # one diagonal, not a chain of scatters: configs build this start for every check
        return GramState(gram=jnp.diag(jnp.asarray([s**2] * S + [st**2] * T)),
                         params=self.params0())

    # -- derived from the fields: the config tables -------------------------------------------
    @classmethod
    def section(cls) -> type:
        """The `[model]` table of this model ([`model_table`][])."""
        return model_table(cls)

    @classmethod
    def training(cls) -> type:
        """The `[training]` table of this model ([`training_table`][])."""
        return training_table(cls)

    @classmethod
    def from_config(cls, cfg: Any) -> ModelBase:
        """The model of a validated [`headflow.dynamics.Config`][], from its `[model]` and
        `[training]` tables; the field named like each of its `extra_sections` is that
        section's object (`[prior]`: [`headflow.dynamics.Config.build_prior`][])."""
        extra = {name: cfg.build_section(name) for name in cls.extra_sections}
        return from_tables(cls, cfg.model, cfg.training, **extra)

    @classmethod
    def describe(cls) -> list[tuple[str, str, str]]:
        """`(config key, default, help)` of every key of the model's `[model]` and
        `[training]` tables (what `headflow models` lists; [`describe`][])."""
        return describe(cls)

    def hyperparameters(self, cfg: Any, steps: Any) -> tuple[Hyperparameter, ...]:
        """The differentiable hyperparameters of the config `cfg` ([`Hyperparameter`][]s,
        selecting leaves of a [`CurvePoint`][]), given its step sizes `steps`. Derived:
        `training.lr` (also the scalar parameters' step when its own key is not set), that
        key, `training.weight_decay`, `training.lr_schedule` (its knot values, which then
        replace `training.lr`), and every float field made with [`param`][]."""
        second = f"training.{self.lr_bias_key}"
        own = getattr(cfg.training, self.lr_bias_key, None) is not None
        own_schedule = getattr(cfg.training, f"{self.lr_bias_key}_schedule", None) is not None
        shared = not (own or own_schedule)     # the scalar parameters step with `lr`
        out: list[Hyperparameter] = []
        if steps.lr_schedule is not None and shared:
            out.append(Hyperparameter("training.lr_schedule",
                                      lambda p: (p.steps.lr_schedule.values,
                                                 p.steps.lr_bias_schedule.values)))
        elif steps.lr_schedule is not None:
            out.append(Hyperparameter("training.lr_schedule",
                                      lambda p: p.steps.lr_schedule.values))
        elif shared:
            out.append(Hyperparameter("training.lr", lambda p: (p.steps.lr, p.steps.lr_bias)))
        else:
            out.append(Hyperparameter("training.lr", lambda p: p.steps.lr))
        if own and not own_schedule:
            out.append(Hyperparameter(second, lambda p: p.steps.lr_bias))
        out.append(Hyperparameter("training.weight_decay", lambda p: p.steps.weight_decay))
        for name, p in params_of(type(self)):
            if p.type is float and not p.choices:
                out.append(Hyperparameter(f"{p.section}.{config_key(name, p)}",
                                          functools.partial(model_field, name=name)))
        if own_schedule:
            out.append(Hyperparameter(f"{second}_schedule",
                                      lambda p: p.steps.lr_bias_schedule.values))
        return tuple(out)

    def polynomial_degree(self) -> int | None:
        """The largest degree of `predict` and `target` as polynomials in the fields, when
        they are polynomials (phase retrieval: 2); None (the default) otherwise. A model that
        declares it gets exact expectations by default: tensor Gauss–Hermite rules of
        sufficient order for its risk, drift and diffusion (`[ode] expectation = "exact"`)."""
        return None

    def loss_degree(self) -> int | None:
        """The degree of the per-sample `loss` in the fields and the label noise (default:
        `2 · polynomial_degree()`, the square loss); a model that overrides `loss` and
        declares a degree states its loss's degree here."""
        d = self.polynomial_degree()
        return None if d is None else 2 * max(d, 1)

    def symmetries(self) -> tuple[AbstractSymmetry, ...]:
        """The exact symmetries of the model beyond the permutations of its students (which
        the engine always assumes): e.g. `SignFlip(teacher=0)` ([`SignFlip`][]) for a target
        even in its field. Every node set is closed under the group they generate with the
        student permutations. Default: none."""
        return ()

    def escape_observable(self, named: Mapping[str, Any]) -> Any:
        """The observable whose persistent crossing of the escape threshold is the escape from
        the unspecialized plateau ([`headflow.dynamics.measures.escape_crossing`][]), from the
        named order parameters `named` ([`named`][]'s view or the arrays of an output file,
        numpy or JAX, leading batch axes kept; shape: the batch axes). Every report of escapes
        reads it.

        Default, on the layout's alignment arrays `(R, Q)`: with two students or more, the
        spread between them ([`headflow.dynamics.measures.head_spread`][]); with one, its
        alignment with its best teacher, `max_n |R_n|/√(Q T_nn)`
        ([`headflow.dynamics.measures.best_alignment`][]; `T`, the teachers' Gram matrix, read
        from `named["T"]` when the view has it, else `|w*_n|²/D = 1`)."""
        a, g = self.layout.alignment
        if self.n_students >= 2:
            return head_spread(named[a], named[g])
        return best_alignment(named[a], named[g], named.get("T"))[..., 0]

    def readout(self, params: Mapping[str, Array]) -> Readout | None:
        """The readout structure, or None when the model has none (no exact backend)."""
        del params
        return None

    # -- generic, written once over the declarations above ------------------------------------
    @property
    def n_rows(self) -> int:
        """`P = S + T`, the rows of the Gram matrix."""
        return self.n_students + self.n_teachers

    def initial_state(self, key: PRNGKeyArray, dim: int | Float[Array, ""]) -> GramState:
        """The order parameters of one random initialization at `dim`, exactly in the law of
        those of [`init_weights`][].

        For the default [`init_weights`][] (independent Gaussian rows) they are drawn without
        the weights, at a cost that does not depend on D: the Gram matrix over D of `P`
        independent standard Gaussian rows is `L Lᵀ/D`, `L` the Bartlett factor of a Wishart
        matrix (`L_ii² ~ χ²_{D−i}`, standard normals below the diagonal), scaled by the rows'
        standard deviations; a [`spherical`][] student's row and column are then divided by
        its norm, which is what rescaling its weights to `|w|² = D` does to them. A model that
        overrides [`init_weights`][] (and any `dim ≤ P`) gets the Gram matrix of its weights.
        `dim` may be a traced scalar where the draw does not need the weights
        ([`start_dim`][])."""
        P = self.n_rows
        if type(self).init_weights is not ModelBase.init_weights or (
                isinstance(dim, int) and dim < P + 1):     # a traced `dim` is at least P + 1
            return self.init_weights(key, int(dim), jnp.float64).state()
        rows, S = self._rows(), self.n_students
        std = jnp.concatenate([
            jnp.broadcast_to(jnp.asarray(Rows.value(self, rows.student_std), jnp.float64), (S,)),
            jnp.broadcast_to(jnp.asarray(Rows.value(self, rows.teacher_std), jnp.float64),
                             (P - S,))])
        kc, kn = jr.split(key)
        D = jnp.asarray(dim, jnp.float64)
        L = bartlett(chi_square(kc, D - jnp.arange(P, dtype=jnp.float64)),
                     jr.normal(kn, (P * (P - 1) // 2,), jnp.float64))
        gram = std[:, None] * (L @ L.T) / D * std[None, :]
        if self.spherical:                  # |w_i|² = D: the student rows over their norms
            scale = jnp.where(jnp.arange(P) < S, 1.0 / jnp.sqrt(jnp.diag(gram)), 1.0)
            gram = scale[:, None] * gram * scale[None, :]
        return GramState(gram=gram, params={k: jnp.asarray(v, jnp.float64)
                                            for k, v in self.params0().items()})

    def start_dim(self, dim: int) -> int | Float[Array, ""]:
        """`dim` in the form [`initial_state`][] takes it: a float64 scalar where the start is
        the Bartlett draw, which uses D as a value only, so one compiled program serves every
        D; else the int, which sets the shapes of the weights the start is drawn from (a model
        that overrides [`init_weights`][], or `dim ≤ P`)."""
        if type(self).init_weights is ModelBase.init_weights and dim >= self.n_rows + 1:
            return jnp.asarray(dim, jnp.float64)
        return int(dim)

    def check(self) -> None:
        """One-line [`ConfigError`][]s for a model whose declarations do not fit together:
        `rows` naming no field or giving no student or no teacher, a start that is not a Gram
        matrix, degrees that are not integers, symmetries that are not [`SignFlip`][]s of its
        rows, or `predict`, `target` or `loss` that fail on fields of the declared sizes or do
        not return a scalar (checked by shape, without computing).

        The checks depend on the model's value only, so a model equal to one checked before in
        this process (a grid of configs differing in their training keys) is not checked
        again."""
        _checked(self)

    def _check(self) -> None:
        name = type(self).__name__

        def user(what: str, call: Any) -> Any:
            try:
                return call()
            except ConfigError:
                raise
            except Exception as err:                # noqa: BLE001 - the user's code: one line
                raise ConfigError(f"model {name}: {what} fails: {type(err).__name__}: "
                                  f"{err}".replace("\n", " ")) from None

        S, T = user("rows", lambda: (self.n_students, self.n_teachers))
        if S < 1 or T < 1:
            raise ConfigError(f"model {name}: rows declare {S} student and {T} teacher rows; "
                              "both must be at least 1")
        start = user("limit_state", self.limit_state)
        self.check_state(start, what=f"model {name}: its D → ∞ start")
        for what in ("polynomial_degree", "loss_degree"):
            d = user(what, getattr(self, what))
            if d is not None and (not isinstance(d, int) or isinstance(d, bool) or d < 0):
                raise ConfigError(f"model {name}: {what}() must be None or an integer >= 0, "
                                  f"got {d!r}")
        for s in user("symmetries", lambda: tuple(self.symmetries())):
            if not isinstance(s, AbstractSymmetry):
                raise ConfigError(f"model {name}: symmetries() must return SignFlip objects, "
                                  f"got {type(s).__name__}")
            user("symmetries", lambda s=s: s.row_signs(S, T))
        params = start.params
        calls = {"predict": lambda: self.predict(params, jnp.zeros(S)),
                 "target": lambda: self.target(params, jnp.zeros(T)),
                 "loss": lambda: self.loss(params, jnp.zeros(S), jnp.zeros(()))}
        for what, call in calls.items():
            out = user(f"{what} on {S} student and {T} teacher fields",
                       lambda call=call: jax.eval_shape(call))
            shape = getattr(out, "shape", None)
            if shape != ():
                got = (f"shape {tuple(shape)}" if shape is not None
                       else f"a {type(out).__name__}")
                raise ConfigError(f"model {name}: {what} must return a scalar, got {got}")

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
        S = self.n_students
        if finite and self.spherical and not np.allclose(np.diag(gram)[:S], 1.0, rtol=0,
                                                         atol=tol):
            raise HeadflowError(f"{what}: the students of a spherical model have Q_ii = 1, "
                                f"got {np.round(np.diag(gram)[:S], 6).tolist()}")
        lam = float(np.linalg.eigvalsh(0.5 * (gram + gram.T))[0]) if finite else float("nan")
        scale = max(1.0, float(np.max(np.abs(gram)))) if finite else 1.0
        if not np.isfinite(lam) or lam < -tol * scale:
            raise HeadflowError(f"{what}: not a valid Gram matrix (smallest eigenvalue "
                                f"{lam:.3g} < 0)")


def gaussian_rows(key: PRNGKeyArray, n: int, dim: int, std: Any, dtype: Any) -> Array:
    """`n` vectors of dimension `dim` with i.i.d. `N(0, std²)` entries."""
    return std * jr.normal(key, (n, dim), dtype=dtype)


def sphere_rows(rows: Float[Array, "n D"]) -> Float[Array, "n D"]:
    """`rows` rescaled to the sphere `|w|² = D` (the projection of spherical SGD)."""
    D = rows.shape[-1]
    norm = jnp.sqrt(jnp.sum(rows.astype(jnp.float64) ** 2, axis=-1, keepdims=True) / D)
    return (rows / norm).astype(rows.dtype)


_REGISTRY: Registry[type[ModelBase]] = Registry("model", "kind")

_M = TypeVar("_M", bound=type[ModelBase])


def register_model(cls: _M) -> _M:
    """Class decorator: make `cls` available as `[model] kind = cls.kind`."""
    _REGISTRY.register(cls)
    return cls


def unregister_model(kind: str) -> None:
    """Remove a registered model (tests that register temporary ones)."""
    _REGISTRY.unregister(kind)


def model_kinds() -> tuple[str, ...]:
    """The model kinds by name: the built-in models (`"attention"` first), the other
    registered models, then those installed packages register under the entry-point group
    `headflow.models`."""
    plugins = tuple(k for k in plugin_entry_points() if k not in _REGISTRY)
    names = _REGISTRY.names()
    return (*sorted(names, key=lambda k: k != "attention"), *plugins)


def model_class(kind: str) -> type[ModelBase]:
    """The model class of `[model] kind`: a registered name, an entry point of the group
    `headflow.models`, `"path/file.py:ClassName"` or `"package.module:ClassName"`; a one-line
    [`ConfigError`][] naming `model.kind` otherwise."""
    if kind in _REGISTRY:
        return _REGISTRY.get(kind, ConfigError)
    if split_kind(kind) is not None:
        return load_code_model(kind, ModelBase)   # type: ignore[return-value]
    plugins = plugin_entry_points()
    if kind in plugins:
        return load_plugin(kind, plugins[kind], ModelBase)  # type: ignore[return-value]
    raise ConfigError(f"model.kind = {kind!r}: unknown model; choose one of "
                      f"{', '.join(map(repr, model_kinds()))}, or name your own as "
                      "'file.py:ClassName' or 'package.module:ClassName'")


@by_value
def _checked(model: ModelBase) -> None:
    model._check()
