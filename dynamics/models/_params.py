"""A model's parameters are its fields (`docs/models.md#parameters`): each field made with
[`param`][] is a config key, and everything the command line needs of a model (its `[model]`
and `[training]` tables, their types, defaults and one-line errors, `--set`, `headflow models`,
the differentiable hyperparameters) is derived here once, for every model, from those
declarations. A model writes no config class, `validate()` or `from_config`.

Also here: [`Rows`][], the declaration of a model's Gram layout (how many student and teacher
rows, and their initial scales), from which the engine derives `n_students`, `n_teachers`,
`named`, `limit_state` and the default `init_weights`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from collections.abc import Callable
from typing import Any

import equinox as eqx
import numpy as np

from .._errors import ConfigError
from .._schedule import Schedule

_MISSING = object()


@dataclasses.dataclass(frozen=True)
class Param:
    """The declaration behind a [`param`][] field: its config `section` and `key`, the
    config-side `default` and `type`, its bounds, `choices`, `length` (a list of that many
    numbers; an int or the name of an int field), the `convert`er from the config value to the
    field's value, and a one-line `help`."""

    default: Any
    type: Any
    section: str = "model"
    key: str | None = None
    ge: float | int | None = None
    gt: float | int | None = None
    le: float | int | None = None
    lt: float | int | None = None
    choices: tuple | None = None
    length: int | str | None = None
    convert: Callable[[Any], Any] | None = None
    help: str = ""

    def check(self, key: str, value: Any, section: Any) -> None:
        """A one-line [`ConfigError`][headflow.dynamics.ConfigError] unless `value` (already
        of the config type) satisfies the declaration; `section` holds the other keys."""
        if value is None:
            return
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{key} = {value!r}: choose one of "
                              f"{', '.join(map(repr, self.choices))}")
        if self.length is not None:
            n = (self.length if isinstance(self.length, int)
                 else getattr(section, self.length))
            if any(isinstance(x, bool) for x in value):
                raise ConfigError(f"{key}: entries must be numbers")
            try:
                arr = np.asarray(value, dtype=np.float64)
            except (TypeError, ValueError):
                raise ConfigError(f"{key}: must be a list of {n} numbers") from None
            if arr.shape != (n,):
                where = f"{self.length} = {n}" if isinstance(self.length, str) else str(n)
                raise ConfigError(f"{key}: must have {where} entries (got shape "
                                  f"{list(arr.shape)})")
            if not np.all(np.isfinite(arr)):
                raise ConfigError(f"{key}: entries must be finite")
            return
        for bound, op, ok in (("ge", ">=", lambda v, b: v >= b), ("gt", ">", lambda v, b: v > b),
                              ("le", "<=", lambda v, b: v <= b), ("lt", "<", lambda v, b: v < b)):
            b = getattr(self, bound)
            if b is not None and not ok(value, b):
                raise ConfigError(f"{key} = {value}: must be {op} {b:g}")
        if self.convert is not None:
            self.convert(value)           # raises its own one-line ConfigError


class CurvePoint(eqx.Module):
    """What a differentiable learning curve substitutes its parameters into: a vector field
    or a diffusion (`field`, with its `model` and `steps`) and the start of the curve
    (`start`: a callable `start(model, key, dim)` whose leaves are the start's own
    parameters, e.g. initial scales)."""

    field: Any
    start: Any

    @property
    def model(self) -> Any:
        return self.field.model

    @property
    def steps(self) -> Any:
        return self.field.steps


@dataclasses.dataclass(frozen=True)
class Hyperparameter:
    """A differentiable config key (`key`, e.g. `"training.lr"`) and the leaf (or the leaves
    set together: a tuple) that `select` picks in a [`CurvePoint`][]: in its model
    (`p.model.noise`), its step sizes (`p.steps.lr`, [`headflow.dynamics.StepSizes`][]) or
    its start (`p.start.key_std`). [`get`][] and [`set`][] read and replace it; a key whose
    value enters otherwise (a factor applied to a prior) is a subclass that overrides them."""

    key: str
    select: Callable[[Any], Any]

    def _leaves(self, point: Any) -> tuple:
        got = self.select(point)
        return got if isinstance(got, tuple) else (got,)

    def get(self, point: Any) -> Any:
        """The value in `point` (the first leaf when it selects several)."""
        return self._leaves(point)[0]

    def set(self, point: Any, value: Any) -> Any:
        """`point` with the selected leaf (or leaves) replaced by `value`."""
        n = len(self._leaves(point))
        return eqx.tree_at(self._leaves, point, (value,) * n)


def model_field(point: Any, name: str) -> Any:
    """The model's field `name` in a [`CurvePoint`][] (a selector)."""
    return getattr(point.model, name)


def param(default: Any = _MISSING, *, section: str = "model", key: str | None = None,
          ge: float | int | None = None, gt: float | int | None = None,
          le: float | int | None = None, lt: float | int | None = None,
          choices: tuple | None = None,
          length: int | str | None = None, convert: Callable[[Any], Any] | None = None,
          type: Any = None, static: bool | None = None, help: str = "") -> Any:
    """A model field that is a parameter: `[section] key` of the config (default: `[model]`,
    the field's name), with its default, bounds, choices, list length and help.

    The field's value is `convert(config value)` (default: the value itself; e.g. a unit's
    name converted to the unit). `static` (default: for bool, int and str values) makes the
    field part of the model's structure; the other (float) fields are leaves, so they are the
    model's differentiable hyperparameters. `type` is the config-side type (default: the
    type of `default`; give it when the default is None)."""
    if default is _MISSING:
        raise TypeError("param() needs a default")
    ctype = type if type is not None else builtins_type(default)
    if static is None:
        static = ctype in (bool, int, str)
    meta = Param(default=default, type=ctype, section=section, key=key, ge=ge, gt=gt, le=le,
                 lt=lt, choices=choices, length=length, convert=convert, help=help)
    value = default if convert is None or default is None else convert(default)
    return eqx.field(default=value, static=static, metadata={"param": meta})


def builtins_type(value: Any) -> Any:
    """The config type of a default value."""
    for t in (bool, int, float, str, list, dict):
        if isinstance(value, t):
            return t
    raise TypeError(f"param({value!r}): give type= (the config type of its values)")


def params_of(cls: type) -> list[tuple[str, Param]]:
    """`(field name, declaration)` of every [`param`][] field of a model class, in order."""
    return [(f.name, f.metadata["param"]) for f in dataclasses.fields(cls)
            if "param" in f.metadata]


def config_key(name: str, p: Param) -> str:
    """The key of a field in its section."""
    return p.key or name


@dataclasses.dataclass(frozen=True)
class Rows:
    """The Gram layout of a model: `students` and `teachers` rows (an int, or the name of an
    int field), and the standard deviation of their entries at the start, `w ~ N(0, s² I)`
    (a number, or the name of a field). The engine derives from it `n_students`,
    `n_teachers`, `named` (`Q` students × students, `R` students × teachers, `T` teachers ×
    teachers, then the scalar parameters), the D → ∞ start `limit_state` (`Q = s² I`,
    `R = 0`, `T = s*² I`) and the default `init_weights`."""

    students: int | str = 1
    teachers: int | str = 1
    student_std: float | str = 1.0
    teacher_std: float | str = 1.0

    @staticmethod
    def value(model: Any, v: Any) -> Any:
        """`v`, or the model's field `v` when it is a name."""
        if not isinstance(v, str):
            return v
        if not hasattr(model, v):
            raise ConfigError(f"model {type(model).__name__}: rows name the field {v!r}, "
                              "which the model does not declare")
        return getattr(model, v)


# -- the config tables, derived once per model class -------------------------------------------

class _Section:
    """Base of the derived config tables: `validate()` checks every declared parameter."""

    _params: typing.ClassVar[tuple[tuple[str, str, Param], ...]] = ()
    _where: typing.ClassVar[str] = "model"

    def validate(self) -> None:
        for _, key, p in self._params:
            p.check(f"{self._where}.{key}", getattr(self, key), self)
        extra = getattr(self, "_validate_more", None)
        if extra is not None:
            extra()


def _table(name: str, where: str, fields: list[tuple[str, Any, Any]],
           params: tuple[tuple[str, str, Param], ...], namespace: dict | None = None,
           base: type = _Section) -> type:
    keys = [k for k, _, _ in fields]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ConfigError(f"model {name.removesuffix('Model').removesuffix('Training')}: "
                          f"[{where}] would have the key {twice[0]!r} twice (a parameter "
                          "named like one of the engine's keys; give it another `key=`)")
    cls: Any = dataclasses.make_dataclass(
        name, [(k, t, dataclasses.field(default=d)) for k, t, d in fields],
        bases=(base,), frozen=True, namespace=namespace or {})
    cls._params = params
    cls._where = where
    return cls


def _optional(t: Any) -> Any:
    return t | None


@functools.cache
def model_table(cls: Any) -> Any:
    """The `[model]` table of a model class: `kind` and every `[model]` parameter."""
    params = tuple((n, config_key(n, p), p) for n, p in params_of(cls) if p.section == "model")
    fields: list[tuple[str, Any, Any]] = [("kind", str, cls.kind)]
    fields += [(k, _optional(p.type) if p.default is None else p.type, p.default)
               for _, k, p in params]
    return _table(f"{cls.__name__}Model", "model", fields, params)


class _TrainingBase(_Section):
    """The generic `[training]` keys of every model of the family (`docs/models.md`)."""

    lr: float
    lr_schedule: dict | None
    weight_decay: float
    batch: int
    t_max: float

    def _validate_more(self) -> None:
        key = type(self)._lr_bias_key
        for name in ("lr", "weight_decay", key):
            value = getattr(self, name, None)
            if value is not None and not value >= 0:
                raise ConfigError(f"training.{name} = {value}: must be >= 0")
        if self.batch < 1:
            raise ConfigError(f"training.batch = {self.batch}: must be >= 1")
        if not self.t_max > 0:
            raise ConfigError(f"training.t_max = {self.t_max}: must be > 0")
        for name in ("lr_schedule", f"{key}_schedule"):
            if getattr(self, name, None) is not None:
                Schedule.from_table(f"training.{name}", getattr(self, name))

    _lr_bias_key: typing.ClassVar[str] = "lr_params"

    def scalar_step(self) -> float:
        """The step size of the scalar parameters (`StepSizes.lr_bias`): the model's key for
        it (`lr_bias_key`, default `lr_params`) when set, else `lr`."""
        second = getattr(self, type(self)._lr_bias_key, None)
        return self.lr if second is None else second

    def scalar_schedule(self) -> dict | None:
        """The schedule of the scalar parameters' step (`StepSizes.lr_bias_schedule`): their
        own (`<lr_bias_key>_schedule`) when set, else that of `lr` when their own step is not
        set either."""
        key = type(self)._lr_bias_key
        own = getattr(self, f"{key}_schedule", None)
        if own is not None:
            return own
        return self.lr_schedule if getattr(self, key, None) is None else None

    # where the model's key is itself `lr_bias` (the attention model), its field holds the value
    lr_bias = property(scalar_step)
    lr_bias_schedule = property(scalar_schedule)


def _moves_scalars(cls: Any) -> bool:
    """Whether a model class can train scalar parameters (it defines `trained`)."""
    return any("trained" in vars(c) for c in cls.__mro__[:-1]
               if c.__name__ not in ("AbstractModel", "ModelBase"))


@functools.cache
def training_table(cls: Any) -> Any:
    """The `[training]` table of a model class: the generic keys (`lr`, default
    `cls.lr_default`; `weight_decay`, `batch`, `t_max`, `lr_schedule`; for a model that defines
    `trained`, the scalar parameters' step `cls.lr_bias_key`, default `cls.lr_bias_default`, and
    its schedule `<lr_bias_key>_schedule`) and every parameter declared with
    `section="training"`."""
    params = tuple((n, config_key(n, p), p) for n, p in params_of(cls)
                   if p.section == "training")
    scalars = _moves_scalars(cls)
    fields: list[tuple[str, Any, Any]] = [("lr", float, float(cls.lr_default))]
    if scalars:
        default = cls.lr_bias_default
        fields.append((cls.lr_bias_key, float if default is not None else float | None,
                       None if default is None else float(default)))
    fields += [("weight_decay", float, 0.0), ("batch", int, 1)]
    fields += [(k, _optional(p.type) if p.default is None else p.type, p.default)
               for _, k, p in params]
    fields += [("t_max", float, float(cls.t_max)), ("lr_schedule", dict | None, None)]
    if scalars:
        fields.append((f"{cls.lr_bias_key}_schedule", dict | None, None))
    return _table(f"{cls.__name__}Training", "training", fields, params,
                  namespace={"_lr_bias_key": cls.lr_bias_key}, base=_TrainingBase)


def from_tables(cls: Any, model: Any, training: Any, **fields: Any) -> Any:
    """The model of the validated `[model]` and `[training]` tables (and the other `fields`
    given)."""
    kwargs = dict(fields)
    for name, p in params_of(cls):
        value = getattr(model if p.section == "model" else training, config_key(name, p))
        if value is not None and p.convert is not None:
            value = p.convert(value)
        elif value is not None and p.length is not None:
            value = np.asarray(value, dtype=np.float64)
        elif p.type is float and value is not None:
            value = float(value)
        kwargs[name] = value
    return cls(**kwargs)


_ENGINE_HELP = {
    "model.kind": "the model",
    "training.lr": "η, the step size of the weights; >= 0",
    "training.weight_decay": "λ, the weight decay; >= 0",
    "training.batch": "B, samples per step; >= 1",
    "training.t_max": "the training time, steps/D; > 0",
    "training.lr_schedule": "η(t): {kind = 'linear' | 'log', times, values}; replaces lr",
}


def describe(cls: Any) -> list[tuple[str, str, str]]:
    """`(section.key, default, help)` of every key of a model's two tables, for
    `headflow models` and `--help`."""
    key = f"training.{cls.lr_bias_key}"
    engine = {**_ENGINE_HELP, key: "the step size of the scalar parameters; >= 0" + (
        "" if cls.lr_bias_default is not None else " (unset: lr)"),
        f"{key}_schedule": f"its schedule, as lr_schedule; replaces {cls.lr_bias_key}"}
    out = []
    for table in (model_table(cls), training_table(cls)):
        docs = {k: p for _, k, p in table._params}
        for f in dataclasses.fields(table):
            p = docs.get(f.name)
            bounds = ""
            if p is not None:
                bounds = ", ".join(f"{op} {getattr(p, b):g}" for b, op in
                                   (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
                                   if getattr(p, b) is not None)
                if p.choices:
                    bounds = "one of " + ", ".join(map(repr, p.choices))
            help_ = p.help if p is not None else engine.get(f"{table._where}.{f.name}", "")
            text = "; ".join(x for x in (help_, bounds) if x)
            default = f.default
            shown = ("-" if default is None else
                     repr(default) if not isinstance(default, float) or math.isfinite(default)
                     else str(default))
            out.append((f"{table._where}.{f.name}", shown, text))
    return out
