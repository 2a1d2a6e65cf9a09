"""The TOML configuration of every experiment (the keys are documented in the README).

Every key has a default; unknown keys, wrong types and out-of-range values raise a
[`ConfigError`][] naming the key. `--set section.key=value` overrides parse `value` as TOML (bare
words are taken as strings).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import tomli_w

from ._errors import ConfigError
from .expectations import MIN_SAMPLES
from .models._base import model_class
from .models._loading import resolve_kind
from .priors import REQUIRED, AbstractPrior, prior_class, prior_kinds


@dataclasses.dataclass(frozen=True)
class PriorSection:
    """`[prior]`: `kind` (a registered prior) and that prior's own keys (`values`), as the user
    gave them. [`resolved`][] fills the defaults of the prior's schema and validates; read a key
    as an attribute (`cfg.prior.amplitude`)."""

    kind: str = "flipped_spike"
    values: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    explicit: frozenset[str] | None = dataclasses.field(default=None, compare=False)
    """The keys the user set (None: all of `values`)."""

    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("values", {})
        if name in values:
            return values[name]
        raise AttributeError(f"prior.{name}: not a key of prior.kind = "
                             f"{self.__dict__.get('kind')!r}")

    def resolved(self, F: int) -> PriorSection:
        """Defaults filled in and every key checked against the prior's schema."""
        cls = prior_class(self.kind)
        known = {p.name: p for p in cls.params}
        for key in self.values:
            if key not in known:
                raise ConfigError(f"prior.{key} is not used by prior.kind = {self.kind!r} "
                                  f"(it uses {', '.join(sorted(known))})")
        out: dict[str, Any] = {}
        for name, param in known.items():
            if name in self.values:
                value = _coerce(f"prior.{name}", self.values[name], param.kind | None)
            else:
                value = param.default_for(F)
                if value is REQUIRED:
                    raise ConfigError(f"prior.{name} is required for prior.kind = "
                                      f"{self.kind!r} ({param.help})")
            if value is not None and param.check is not None:
                problem = param.check(value, F)
                if problem:
                    raise ConfigError(f"prior.{name} = {value!r}: {problem}" if not isinstance(
                        value, list) else f"prior.{name}: {problem}")
            out[name] = value
        explicit = frozenset(self.values) if self.explicit is None else self.explicit
        return PriorSection(kind=self.kind, values=MappingProxyType(out), explicit=explicit)

    def with_kind(self, kind: str) -> PriorSection:
        """The section for another prior kind: the keys the user set that the new kind also
        uses are kept, the others dropped (their defaults come from the new kind)."""
        if kind == self.kind:
            return self
        used = {p.name for p in prior_class(kind).params}
        explicit = set(self.values) if self.explicit is None else set(self.explicit)
        keep = {k: v for k, v in self.values.items() if k in explicit & used}
        return PriorSection(kind=kind, values=keep, explicit=frozenset(keep))

    def build(self, F: int) -> AbstractPrior:
        """The prior object (validated; `amplitude` applied). Errors of the prior's own checks
        come back naming the `prior.` key."""
        r = self.resolved(F)
        try:
            return prior_class(r.kind).from_params(F, r.values)
        except ValueError as err:
            raise ConfigError(f"prior.{err}") from None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **{k: v for k, v in self.values.items() if v is not None}}


@dataclasses.dataclass(frozen=True)
class ODESection:
    expectation: str = "qmc"    # scrambled Sobol: the error of MC at 4x the nodes (measured,
                                # benchmarks/bench_theory_cost.py)
    samples: int | str = 16384  # a number of nodes, or "auto": sized for error_target
    sgd_noise: bool = True
    solver: str = "tsit5"
    rtol: float = 1e-6
    atol: float = 1e-8
    form: str = "manifold"      # "manifold" (fast path) | "full" (cross overlaps kept)
    rhs: str = "auto"           # "autodiff" | "symbolic" | "auto" (symbolic where derived,
                                # else autodiff: the fastest exact right-hand side)
    error_target: float | None = None   # samples = "auto": largest relative RHS error
                                        # (default 1e4 · rtol)
    quantity_target: float | None = None  # samples = "auto": largest error of the quantity
                                          # the command reports (default: the final risk),
                                          # from its change on 4x the pilot's nodes
    seed: int = 0               # of the fixed (common) random numbers
    max_steps: int = 100000
    init: str | dict = "random"  # "random": one random init at sim.dim (O(1/√D) head
                                 # differences); "symmetric": its D → ∞ limit (never
                                 # specializes); a table of named order parameters (models of
                                 # the family): those values, the rest from the D → ∞ limit

    def validate(self) -> None:
        _choice("ode.expectation", self.expectation,
                ("mc", "qmc", "quadrature", "sparse", "exact"))
        if self.samples != "auto":
            if not isinstance(self.samples, int) or isinstance(self.samples, bool):
                raise ConfigError(f"ode.samples = {self.samples!r}: must be an integer or "
                                  "\"auto\"")
            _at_least("ode.samples", self.samples, MIN_SAMPLES)
        if self.error_target is not None:
            _positive("ode.error_target", self.error_target)
        if self.quantity_target is not None:
            _positive("ode.quantity_target", self.quantity_target)
        _positive("ode.rtol", self.rtol)
        _positive("ode.atol", self.atol)
        _choice("ode.form", self.form, ("manifold", "full"))
        _choice("ode.rhs", self.rhs, ("auto", "autodiff", "symbolic"))
        _at_least("ode.seed", self.seed, 0)
        _at_least("ode.max_steps", self.max_steps, 1)
        if isinstance(self.init, dict):
            for name, value in self.init.items():
                try:
                    arr = np.asarray(value, dtype=np.float64)
                except (TypeError, ValueError):
                    raise ConfigError(f"ode.init.{name}: must be a number or a (nested) list "
                                      "of numbers") from None
                if _has_bool(value) or not np.all(np.isfinite(arr)):
                    raise ConfigError(f"ode.init.{name}: entries must be finite numbers")
        else:
            _choice("ode.init", self.init, ("random", "symmetric"))
        if not isinstance(self.solver, str) or not self.solver:
            raise ConfigError(f"ode.solver = {self.solver!r}: must be a diffrax solver name")


@dataclasses.dataclass(frozen=True)
class SimSection:
    dim: int = 1000
    seeds: int = 8
    seed: int = 0               # first seed; runs use seed, seed+1, ...
    dtype: str = "float32"
    risk_samples: int = 8192    # Monte Carlo samples of the recorded test risk
    space: str = "weights"      # "weights": D-dimensional SGD; "overlaps": the exact chain of
                                # the overlaps (float64, cost per step independent of D)

    def validate(self) -> None:
        _at_least("sim.dim", self.dim, 2)
        _at_least("sim.seeds", self.seeds, 1)
        _at_least("sim.seed", self.seed, 0)
        _choice("sim.dtype", self.dtype, ("float32", "float64"))
        _at_least("sim.risk_samples", self.risk_samples, MIN_SAMPLES)
        _choice("sim.space", self.space, ("weights", "overlaps"))

    @property
    def run_dtype(self) -> str:
        """The precision SGD runs in: `dtype` in weight space; float64 in overlap space, whose
        increments are O(1/D) and would be lost in float32 accumulation at large D."""
        return "float64" if self.space == "overlaps" else self.dtype


@dataclasses.dataclass(frozen=True)
class SDESection:
    paths: int = 64
    dt: float = 0.25            # largest step (each save interval is cut into equal steps)
    solver: str = "drift_heun"  # "drift_heun" (noise as Euler–Maruyama, drift by Heun's rule;
                                # measured: far less escape delay per cost) | "euler"
    samples_drift: int | None = None    # nodes of the drift (FullField); default: from
                                        # error_target (dynamics.sde.drift_samples)
    samples_noise: int | None = None    # nodes of all fields for the diffusion matrix;
                                        # default: from error_target (noise_samples)
    error_target: float = 0.05  # relative error of the paths' spread that the default node
                                # counts aim for (1024 drift, 256 noise nodes at 0.05)
    noise: str = "nodes"        # "nodes": centred per-sample increments; "eigh": Σ^{1/2}
    brownian: str = "increments"    # "increments": one Gaussian draw per step; "tree": a
                                    # virtual Brownian tree (the same path at any step size)
    seed: int = 0               # of the initial draws and Brownian paths (path i: fold_in i)

    def validate(self) -> None:
        _at_least("sde.paths", self.paths, 1)
        _positive("sde.dt", self.dt)
        if self.solver not in ("euler", "drift_heun"):
            raise ConfigError(f"sde.solver = {self.solver!r}: choose 'euler' (Euler–Maruyama) "
                              "or 'drift_heun' (its drift by Heun's rule); the overlap SDE is "
                              "an Itô SDE with non-commutative noise: diffrax's Heun, midpoint "
                              "and SRK solvers converge to the Stratonovich solution and Itô "
                              "Milstein needs commutative noise")
        if self.samples_drift is not None:
            _at_least("sde.samples_drift", self.samples_drift, MIN_SAMPLES)
        if self.samples_noise is not None:
            _at_least("sde.samples_noise", self.samples_noise, MIN_SAMPLES)
        _positive("sde.error_target", self.error_target)
        if self.error_target >= 1:
            raise ConfigError(f"sde.error_target = {self.error_target}: must be < 1 (a "
                              "relative error)")
        _choice("sde.noise", self.noise, ("nodes", "eigh"))
        _choice("sde.brownian", self.brownian, ("increments", "tree"))
        _at_least("sde.seed", self.seed, 0)


@dataclasses.dataclass(frozen=True)
class OutputSection:
    n_save: int = 200
    spacing: str = "linear"
    t_min: float | None = None  # first non-zero save time for log spacing (default t_max/1000)

    def validate(self) -> None:
        _at_least("output.n_save", self.n_save, 2)
        _choice("output.spacing", self.spacing, ("linear", "log"))
        if self.t_min is not None:
            _positive("output.t_min", self.t_min)


_SECTIONS: dict[str, type | None] = {
    "model": None, "prior": PriorSection, "training": None,
    "ode": ODESection, "sim": SimSection, "output": OutputSection, "sde": SDESection,
}
"""The config's sections, in order; `[model]` and `[training]` are the model class's own
tables (`section()`, `training()`), and `[prior]` is read by the models that declare it
(`extra_sections`)."""

DEFAULT_KIND = "attention"
"""`[model] kind` when the config does not say (left out of a written config)."""


def _default_table(which: str) -> Any:
    cls: Any = model_class(DEFAULT_KIND)
    return (cls.section() if which == "model" else cls.training())()


@dataclasses.dataclass(frozen=True)
class Config:
    """A fully validated experiment configuration."""

    model: Any = dataclasses.field(default_factory=lambda: _default_table("model"))
    prior: PriorSection = PriorSection()
    training: Any = dataclasses.field(default_factory=lambda: _default_table("training"))
    ode: ODESection = ODESection()
    sim: SimSection = SimSection()
    output: OutputSection = OutputSection()
    sde: SDESection = SDESection()

    def __post_init__(self):
        for name in ("model", "training", "ode", "sim", "output", "sde"):
            getattr(self, name).validate()
        cls = self.model_class
        if "prior" not in cls.extra_sections and self.prior != PriorSection():
            raise ConfigError(f"[prior] is not used by model.kind = {self.model_kind!r} (it "
                              "describes the attention model's latent directions)")
        for name, section in cls.check_config(self).items():
            object.__setattr__(self, name, section)
        if self.output.t_min is not None and self.output.t_min >= self.training.t_max:
            raise ConfigError(f"output.t_min = {self.output.t_min}: must be < training.t_max")

    @property
    def model_kind(self) -> str:
        """`[model] kind`: a registered model ([`headflow.dynamics.models`][]), or one named
        by its code (`file.py:Class`, `package.module:Class`)."""
        return self.model.kind

    @property
    def model_class(self) -> Any:
        """The class of `[model] kind`."""
        return model_class(self.model_kind)

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Config:
        body = data.get("model", {})
        kind = _coerce("model.kind", body.get("kind", DEFAULT_KIND),
                       str) if isinstance(body, dict) else DEFAULT_KIND
        kind = resolve_kind(kind, None)
        mcls: Any = model_class(kind)
        if isinstance(body, dict):
            data = {**data, "model": {**body, "kind": kind}}
        classes: dict[str, Any] = {name: c for name, c in _SECTIONS.items()
                                   if name != "prior" or "prior" in mcls.extra_sections}
        classes.update(model=mcls.section(), training=mcls.training())
        if "prior" in data and "prior" not in classes:
            raise ConfigError(f"[prior] is not used by model.kind = {kind!r} (it "
                              "describes the attention model's latent directions)")
        sections: dict[str, Any] = {"model": classes["model"](kind=kind),
                                    "training": classes["training"]()}
        for name, body in data.items():
            if name not in classes:
                raise ConfigError(f"unknown config section [{name}]; known sections: "
                                  f"{', '.join(classes)}")
            if not isinstance(body, dict):
                raise ConfigError(f"[{name}] must be a table of keys")
            if name == "ode" and "expectation" not in body:
                default = _default_expectation(mcls, classes, data)
                body = body if default is None else {**body, "expectation": default}
            sections[name] = (_make_prior(body) if name == "prior"
                              else _make_section(name, classes[name], body))
        if "ode" not in sections:
            default = _default_expectation(mcls, classes, data)
            sections["ode"] = ODESection() if default is None else ODESection(
                expectation=default)
        return cls(**sections)

    @classmethod
    def from_toml(cls, text: str, overrides: list[str] | tuple[str, ...] = ()) -> Config:
        """From TOML text, with `--set` overrides (`"section.key=value"`)."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"invalid TOML ({err})") from None
        return _with_overrides(data, overrides)

    def replace(self, **overrides: Any) -> Config:
        """A copy with `section.key` overrides, e.g. `cfg.replace(**{"model.H": 3})`.

        A new `prior.kind` keeps the prior keys that were set explicitly and that the new kind
        also uses, and drops the others (see [`PriorSection.with_kind`][])."""
        data = self.to_dict()
        if "prior.kind" in overrides:
            kind = _coerce("prior.kind", overrides["prior.kind"], str)
            sec = self.prior.with_kind(kind)
            data["prior"] = {"kind": kind, **{k: v for k, v in sec.values.items()
                                              if v is not None}}
        for dotted, value in overrides.items():
            _assign(data, dotted, value)
        return Config.from_dict(data)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        cls = self.model_class
        out = {}
        for name in _SECTIONS:
            sec = getattr(self, name)
            if name == "prior":
                if "prior" in cls.extra_sections:
                    out[name] = sec.to_dict()
                continue
            out[name] = {f.name: getattr(sec, f.name) for f in dataclasses.fields(sec)
                         if getattr(sec, f.name) is not None}
            if name == "model" and self.model_kind == DEFAULT_KIND:
                del out[name]["kind"]       # the default kind, kept out of written configs
        if self.ode.expectation == cls.default_expectation(self.model, self.training,
                                                           checked=True):
            # a computed default stays computed: a copy with another activation gets its
            # own (config.toml then leaves it out, and reads back the same)
            del out["ode"]["expectation"]
        return out

    def to_toml(self) -> str:
        """The fully resolved configuration as TOML (what `config.toml` holds)."""
        return tomli_w.dumps(self.to_dict())

    def fingerprint(self) -> str:
        return hashlib.sha256(self.to_toml().encode()).hexdigest()

    # -- model objects ------------------------------------------------------------------------
    def build_prior(self) -> AbstractPrior:
        """The prior of `[prior]` on the `[model] F` latent directions."""
        return self.prior.build(self.model.F)

    def build_section(self, name: str) -> Any:
        """The object a model's extra section describes (`extra_sections`; `"prior"`:
        [`build_prior`][])."""
        if name != "prior":
            raise ConfigError(f"[{name}]: not a section a model can declare (known: prior)")
        return self.build_prior()

    def build_model(self) -> Any:
        """The model object of `[model] kind`, built by its class's `from_config` from this
        config's tables."""
        return model_class(self.model_kind).from_config(self)  # type: ignore[attr-defined]

    def save_times(self) -> np.ndarray:
        """The `[output]` time grid in `t = steps/D` (starts at 0, ends at `t_max`)."""
        o, t_max = self.output, self.training.t_max
        if o.spacing == "linear":
            return np.linspace(0.0, t_max, o.n_save)
        t_min = o.t_min if o.t_min is not None else t_max / 1000.0
        return np.concatenate([[0.0], np.geomspace(t_min, t_max, o.n_save - 1)])


def _default_expectation(mcls: Any, classes: dict[str, Any], data: dict[str, Any]
                         ) -> str | None:
    """`[ode] expectation` when the config does not say: the model class's
    `default_expectation` of its validated tables (None: the section's own default)."""
    model = _make_section("model", classes["model"], data.get("model", {}))
    training = _make_section("training", classes["training"], data.get("training", {}))
    model.validate()
    training.validate()
    return mcls.default_expectation(model, training)


def _make_prior(body: dict[str, Any]) -> PriorSection:
    """`[prior]` from a TOML table: `kind` plus the keys of that prior (checked against every
    registered prior's schema, so a key of another kind gets a precise message)."""
    kind = _coerce("prior.kind", body.get("kind", PriorSection.kind), str)
    cls = prior_class(kind)
    used = {p.name for p in cls.params}
    every = {p.name for c in map(prior_class, prior_kinds()) for p in c.params}
    values = {}
    for key, value in body.items():
        if key == "kind":
            continue
        if key not in used:
            if key in every:
                raise ConfigError(f"prior.{key} is not used by prior.kind = {kind!r} "
                                  f"(it uses {', '.join(sorted(used))})")
            raise ConfigError(f"unknown config key prior.{key}; known keys in [prior]: "
                              f"{', '.join(['kind', *sorted(every)])}")
        values[key] = value
    return PriorSection(kind=kind, values=values)


def _make_section(name: str, cls: type, body: dict[str, Any]):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in body.items():
        if key not in fields:
            raise ConfigError(f"unknown config key {name}.{key}; known keys in [{name}]: "
                              f"{', '.join(fields)}")
        kwargs[key] = _coerce(f"{name}.{key}", value, hints[key])
    return cls(**kwargs)


def _coerce(key: str, value: Any, hint: Any) -> Any:
    args = typing.get_args(hint)
    if isinstance(value, dict) and dict in args:     # a keyword or a table (`ode.init`)
        return value
    if int in args and str in args:                  # a number or a keyword ("auto")
        return value if isinstance(value, str) else _coerce(key, value, int)
    base = next((a for a in args if a is not type(None)), hint) if args else hint
    if value is None and type(None) in args:
        return None
    if base is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key} = {value!r}: must be true or false")
        return value
    if base is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{key} = {value!r}: must be an integer")
        return value
    if base is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key} = {value!r}: must be a number")
        if not math.isfinite(value):
            raise ConfigError(f"{key} = {value!r}: must be finite")
        return float(value)
    if base is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key} = {value!r}: must be a string")
        return value
    if base is list:
        if not isinstance(value, list):
            raise ConfigError(f"{key} = {value!r}: must be a list")
        return value
    if base is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key} = {value!r}: must be a table")
        return value
    return value  # pragma: no cover


def _has_bool(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(map(_has_bool, value))
    return isinstance(value, bool)


def _at_least(key, value, low):
    if value < low:
        raise ConfigError(f"{key} = {value}: must be >= {low}")


def _positive(key, value):
    if not value > 0:
        raise ConfigError(f"{key} = {value}: must be > 0")


def _finite(key, value):
    if not math.isfinite(value):
        raise ConfigError(f"{key} = {value}: must be finite")


def _choice(key, value, choices):
    if value not in choices:
        raise ConfigError(f"{key} = {value!r}: choose one of {', '.join(map(repr, choices))}")


def _vector(key, value, F):
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: must be a list of F = {F} numbers") from None
    if arr.shape != (F,):
        raise ConfigError(f"{key}: must have F = {F} entries (got shape {list(arr.shape)})")
    if not np.all(np.isfinite(arr)):
        raise ConfigError(f"{key}: entries must be finite")


def parse_value(text: str) -> Any:
    """A `--set` value: TOML syntax (`3`, `1e-3`, `true`, `[1, 2]`, `"x"`) or a bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _assign(data: dict, dotted: str, value: Any) -> None:
    section, sep, key = dotted.partition(".")
    if not sep or not key or "." in key:
        raise ConfigError(f"--set {dotted}: expected section.key=value")
    data.setdefault(section, {})[key] = value


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()
                ) -> Config:
    """Read a TOML file (or the defaults when `path` is None) and apply `--set` overrides
    (`"section.key=value"`)."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {p} not found") from None
        except IsADirectoryError:
            raise ConfigError(f"config file {p} is a directory") from None
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
            raise ConfigError(f"config file {p}: invalid TOML ({err})") from None
        model = data.get("model")
        if isinstance(model, dict) and isinstance(model.get("kind"), str):
            # a model file is named relative to the config file
            model["kind"] = resolve_kind(model["kind"], p.resolve().parent)
    return _with_overrides(data, overrides)


def _with_overrides(data: dict[str, Any], overrides) -> Config:
    for item in overrides:
        dotted, eq, text = item.partition("=")
        if not eq:
            raise ConfigError(f"--set {item}: expected section.key=value")
        _assign(data, dotted.strip(), parse_value(text.strip()))
    return Config.from_dict(data)
