"""The TOML configuration of every experiment (see the interface spec).

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
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w

from ._errors import ConfigError
from ._model import Model
from .activations import activation_names, get_activation
from .priors import AbstractPrior, Discrete, FlippedSpike, Gaussian, OneHot

_SPIKES = ("flipped_spike", "one_hot")
PRIOR_KINDS = ("flipped_spike", "one_hot", "discrete", "gaussian")


@dataclasses.dataclass(frozen=True)
class ModelSection:
    L: int = 4
    H: int = 2
    F: int = 1
    activation: str = "bayes_softmax"
    noise: float = 0.0
    rho: float = 1.0
    train_values: bool = True

    def validate(self) -> None:
        _at_least("model.L", self.L, 1)
        _at_least("model.H", self.H, 1)
        _at_least("model.F", self.F, 1)
        if self.activation not in activation_names():
            get_activation(self.activation)  # raises with the list of choices
        _at_least("model.noise", self.noise, 0.0)
        _positive("model.rho", self.rho)


@dataclasses.dataclass(frozen=True)
class PriorSection:
    kind: str = "flipped_spike"
    amplitude: float | None = None  # √ν for spikes (default 3); a factor for discrete/gaussian (default 1)
    p: float | None = None          # flipped_spike: probability of + (default 0.7)
    direction: list | None = None   # flipped_spike: unit vector u (default e_1)
    points: list | None = None      # discrete: support points (S lists of F numbers)
    weights: list | None = None     # discrete / one_hot: probabilities
    mean: list | None = None        # gaussian (default 0)
    var: list | None = None         # gaussian (default 1)

    _USED = {"flipped_spike": {"amplitude", "p", "direction"},
             "one_hot": {"amplitude", "weights"},
             "discrete": {"amplitude", "points", "weights"},
             "gaussian": {"amplitude", "mean", "var"}}

    def resolved(self, F: int) -> PriorSection:
        if self.kind not in PRIOR_KINDS:
            raise ConfigError(f"prior.kind = {self.kind!r}: choose one of "
                              f"{', '.join(map(repr, PRIOR_KINDS))}")
        used = self._USED[self.kind]
        for f in dataclasses.fields(self):
            if f.name not in used | {"kind"} and getattr(self, f.name) is not None:
                raise ConfigError(f"prior.{f.name} is not used by prior.kind = {self.kind!r} "
                                  f"(it uses {', '.join(sorted(used))})")
        fill: dict[str, Any] = {}
        if self.amplitude is None:
            fill["amplitude"] = 3.0 if self.kind in _SPIKES else 1.0
        if self.kind == "flipped_spike":
            if self.p is None:
                fill["p"] = 0.7
            if self.direction is None:
                fill["direction"] = [1.0] + [0.0] * (F - 1)
        if self.kind == "gaussian":
            if self.mean is None:
                fill["mean"] = [0.0] * F
            if self.var is None:
                fill["var"] = [1.0] * F
        if self.kind == "discrete" and self.points is None:
            raise ConfigError("prior.points is required for prior.kind = 'discrete' "
                              "(a list of S points, each a list of F numbers)")
        out = dataclasses.replace(self, **fill)
        out._validate(F)
        return out

    def _validate(self, F: int) -> None:
        amp = self.amplitude
        if not isinstance(amp, (int, float)) or not math.isfinite(amp) or amp < 0:
            raise ConfigError(f"prior.amplitude = {amp!r}: must be a finite number >= 0")
        if self.kind == "flipped_spike":
            _vector("prior.direction", self.direction, F)
        if self.kind == "discrete":
            pts = np.asarray(self.points, dtype=object)
            try:
                pts = np.asarray(self.points, dtype=np.float64)
            except (TypeError, ValueError):
                raise ConfigError("prior.points: must be a list of points, each a list of "
                                  f"F = {F} numbers") from None
            if pts.ndim != 2 or pts.shape[1] != F:
                raise ConfigError(f"prior.points: each point must have F = {F} coordinates "
                                  f"(got shape {list(pts.shape)})")
        if self.kind == "gaussian":
            _vector("prior.mean", self.mean, F)
            _vector("prior.var", self.var, F)

    def build(self, F: int) -> AbstractPrior:
        """The prior object (validated; `amplitude` applied)."""
        r = self.resolved(F)
        if r.kind == "flipped_spike":
            return FlippedSpike(r.amplitude, r.p, r.direction)
        if r.kind == "one_hot":
            return OneHot(r.amplitude, F, r.weights)
        if r.kind == "discrete":
            return Discrete(r.points, r.weights).scaled(r.amplitude)
        return Gaussian(r.mean, r.var).scaled(r.amplitude)


@dataclasses.dataclass(frozen=True)
class TrainingSection:
    lr: float = 1.0
    lr_bias: float = 1.0
    weight_decay: float = 0.0
    batch: int = 1
    init_key_std: float = 0.1
    init_value_std: float = 0.1
    init_bias: float = 0.0
    t_max: float = 100.0

    def validate(self) -> None:
        _at_least("training.lr", self.lr, 0.0)
        _at_least("training.lr_bias", self.lr_bias, 0.0)
        _at_least("training.weight_decay", self.weight_decay, 0.0)
        _at_least("training.batch", self.batch, 1)
        _at_least("training.init_key_std", self.init_key_std, 0.0)
        _at_least("training.init_value_std", self.init_value_std, 0.0)
        _finite("training.init_bias", self.init_bias)
        _positive("training.t_max", self.t_max)


@dataclasses.dataclass(frozen=True)
class ODESection:
    expectation: str = "mc"
    samples: int = 65536
    sgd_noise: bool = True
    solver: str = "tsit5"
    rtol: float = 1e-6
    atol: float = 1e-8
    form: str = "manifold"      # "manifold" (fast path) | "full" (cross overlaps kept)
    rhs: str = "autodiff"       # "autodiff" | "symbolic"
    seed: int = 0               # of the fixed (common) random numbers
    max_steps: int = 100000
    init: str = "random"        # "random": one random init at sim.dim (O(1/√D) head
                                # differences); "symmetric": its D → ∞ limit (never specializes)

    def validate(self) -> None:
        _choice("ode.expectation", self.expectation, ("mc", "qmc", "quadrature"))
        _at_least("ode.samples", self.samples, 1)
        _positive("ode.rtol", self.rtol)
        _positive("ode.atol", self.atol)
        _choice("ode.form", self.form, ("manifold", "full"))
        _choice("ode.rhs", self.rhs, ("autodiff", "symbolic"))
        _at_least("ode.seed", self.seed, 0)
        _at_least("ode.max_steps", self.max_steps, 1)
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

    def validate(self) -> None:
        _at_least("sim.dim", self.dim, 2)
        _at_least("sim.seeds", self.seeds, 1)
        _at_least("sim.seed", self.seed, 0)
        _choice("sim.dtype", self.dtype, ("float32", "float64"))
        _at_least("sim.risk_samples", self.risk_samples, 2)


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


_SECTIONS: dict[str, type] = {
    "model": ModelSection, "prior": PriorSection, "training": TrainingSection,
    "ode": ODESection, "sim": SimSection, "output": OutputSection,
}


@dataclasses.dataclass(frozen=True)
class Config:
    """A fully validated experiment configuration."""

    model: ModelSection = ModelSection()
    prior: PriorSection = PriorSection()
    training: TrainingSection = TrainingSection()
    ode: ODESection = ODESection()
    sim: SimSection = SimSection()
    output: OutputSection = OutputSection()

    def __post_init__(self):
        for name in ("model", "training", "ode", "sim", "output"):
            getattr(self, name).validate()
        object.__setattr__(self, "prior", self.prior.resolved(self.model.F))
        self.build_prior()  # the prior classes check the rest (weights, p, var > 0)
        if self.sim.dim < self.model.F + 1:
            raise ConfigError(f"sim.dim = {self.sim.dim}: must exceed model.F = {self.model.F} "
                              "(the teacher needs F + 1 orthogonal directions)")
        if self.output.t_min is not None and self.output.t_min >= self.training.t_max:
            raise ConfigError(f"output.t_min = {self.output.t_min}: must be < training.t_max")

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Config:
        sections = {}
        for name, body in data.items():
            if name not in _SECTIONS:
                raise ConfigError(f"unknown config section [{name}]; known sections: "
                                  f"{', '.join(_SECTIONS)}")
            if not isinstance(body, dict):
                raise ConfigError(f"[{name}] must be a table of keys")
            sections[name] = _make_section(name, _SECTIONS[name], body)
        return cls(**sections)

    def replace(self, **overrides: Any) -> Config:
        """A copy with `section.key` overrides, e.g. `cfg.replace(**{"model.H": 3})`."""
        data = self.to_dict()
        for dotted, value in overrides.items():
            _assign(data, dotted, value)
        return Config.from_dict(data)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        out = {}
        for name in _SECTIONS:
            sec = getattr(self, name)
            out[name] = {f.name: getattr(sec, f.name) for f in dataclasses.fields(sec)
                         if getattr(sec, f.name) is not None}
        return out

    def to_toml(self) -> str:
        """The fully resolved configuration as TOML (what `config.toml` holds)."""
        return tomli_w.dumps(self.to_dict())

    def fingerprint(self) -> str:
        return hashlib.sha256(self.to_toml().encode()).hexdigest()

    # -- model objects ------------------------------------------------------------------------
    def build_prior(self) -> AbstractPrior:
        return self.prior.build(self.model.F)

    def build_model(self) -> Model:
        m = self.model
        return Model(L=m.L, H=m.H, activation=get_activation(m.activation),
                     prior=self.build_prior(), noise=float(m.noise), rho=float(m.rho),
                     train_values=bool(m.train_values))

    def save_times(self) -> np.ndarray:
        """The `[output]` time grid in `t = steps/D` (starts at 0, ends at `t_max`)."""
        o, t_max = self.output, self.training.t_max
        if o.spacing == "linear":
            return np.linspace(0.0, t_max, o.n_save)
        t_min = o.t_min if o.t_min is not None else t_max / 1000.0
        return np.concatenate([[0.0], np.geomspace(t_min, t_max, o.n_save - 1)])


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
    return value  # pragma: no cover


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
    for item in overrides:
        dotted, eq, text = item.partition("=")
        if not eq:
            raise ConfigError(f"--set {item}: expected section.key=value")
        _assign(data, dotted.strip(), parse_value(text.strip()))
    return Config.from_dict(data)
