"""Settings of the five bound experiments (`headflow gpt2 bounds`), with TOML round-trip."""

from __future__ import annotations

import math
import tomllib
from typing import Any

import equinox as eqx

from headflow.dynamics import ConfigError

from ._normalizers import NORMALIZER_NAMES

_TEMPERATURES = tuple(float(f"{10 ** (-2 + 0.25 * i):.6g}") for i in range(13))  # 1e-2 … 1e1
_SEPARABILITY_N = tuple(range(1, 17)) + (20, 24, 28, 32, 40, 48, 56, 64)


def default_critical_grid(length: int) -> tuple[int, ...]:
    """N = 1…16, then a geometric grid (ratio 1.2) up to L − 1."""
    grid = set(range(1, 17))
    value = 16.0
    while value < length - 1:
        value *= 1.2
        grid.add(min(int(round(value)), length - 1))
    return tuple(sorted(n for n in grid if n < length))


class BoundsConfig(eqx.Module):
    """What `gpt2 bounds` computes. Every field is a TOML key of the `[bounds]` table.

    - `lengths`: the context lengths L of experiments 1 and 3 (windows are prefixes of one window
      of `max(lengths)` tokens, exact for causal attention).
    - `n_fixed`: N of experiment 1 (distance vs L).
    - `n_values`: the N of experiment 2 (distance vs N at the largest L).
    - `critical_grid`: N grid of experiment 3 (empty: [`default_critical_grid`][]).
    - `ks_alpha`: level of the Kolmogorov–Smirnov test (0.01; 0.05 as an option).
    - `separability_n`: N grid of experiment 4; `plateau_from`: first N of the reported plateau.
    - `sphere_radius`: M of Theorem 2 (the ratio does not depend on it).
    - `temperatures`, `eps`, `gradient_rows`: experiment 5 (`gradient_rows` query rows, evenly
      spaced, per head; 0 = all rows).
    - `mc_samples`: random subsets per row for the Monte Carlo expectation.
    - `vectors`: token vectors x, `"value"` (default) or `"hidden"` (layer inputs).
    - `reading`: `"sum"` (default) or `"norm"` reading of the distance (see docs/gpt2.md,
      "Theorem 1: which reading").
    - `windows`, `offset`: consecutive text windows and tokens skipped first.
    - `rtol`: relative slack when counting violations of rigorous bounds in float32.
    - `bisection_steps`: iterations of the exact Jacobian-norm solver.
    - `row_blocks`: query rows are processed in this many blocks, each cut to the tokens its
      rows can see (2 blocks skip a quarter of the causal zeros; more blocks skip more but
      compile once per block shape).
    - `seed`: PRNG seed (random subsets, random directions).
    - `normalizers`: the normalizers whose weights the experiments analyse, on the model's own
      logits (docs/gpt2.md, "Normalizers side by side"); the first one's results are the
      report's main sections. `"softmax"` is the model's own attention.
    - `ssmax_length`: SSMax uses `s = 1/log(ssmax_length)` (it equals softmax there).
    - `coverage_n`: the N of the multi-head coverage (docs/gpt2.md, "Multi-head coverage");
      `coverage_target`: the coverage whose number of heads is reported.
    """

    lengths: tuple[int, ...] = eqx.field(static=True, default=(32, 64, 128, 256, 512, 1024))
    n_fixed: int = eqx.field(static=True, default=5)
    n_values: tuple[int, ...] = eqx.field(static=True, default=(1, 5, 10, 20, 100))
    critical_grid: tuple[int, ...] = eqx.field(static=True, default=())
    ks_alpha: float = eqx.field(static=True, default=0.01)
    separability_n: tuple[int, ...] = eqx.field(static=True, default=_SEPARABILITY_N)
    plateau_from: int = eqx.field(static=True, default=16)
    sphere_radius: float = eqx.field(static=True, default=1.0)
    temperatures: tuple[float, ...] = eqx.field(static=True, default=_TEMPERATURES)
    eps: tuple[float, ...] = eqx.field(static=True, default=(1e-3, 1e-1, 10.0))
    gradient_rows: int = eqx.field(static=True, default=128)
    mc_samples: int = eqx.field(static=True, default=4)
    vectors: str = eqx.field(static=True, default="value")
    reading: str = eqx.field(static=True, default="sum")
    windows: int = eqx.field(static=True, default=1)
    offset: int = eqx.field(static=True, default=0)
    rtol: float = eqx.field(static=True, default=1e-4)
    bisection_steps: int = eqx.field(static=True, default=24)
    row_blocks: int = eqx.field(static=True, default=2)
    seed: int = eqx.field(static=True, default=0)
    normalizers: tuple[str, ...] = eqx.field(static=True, default=("softmax",))
    ssmax_length: int = eqx.field(static=True, default=32)
    coverage_n: tuple[int, ...] = eqx.field(static=True, default=(4, 16))
    coverage_target: float = eqx.field(static=True, default=0.99)

    def __check_init__(self):
        def bad(key, why):
            raise ConfigError(f"bounds.{key}: {why}")

        ints = lambda v: isinstance(v, int) and not isinstance(v, bool)  # noqa: E731
        for key in ("lengths", "n_values", "separability_n", "critical_grid", "coverage_n"):
            value = getattr(self, key)
            if not isinstance(value, tuple) or not all(ints(v) and v >= 1 for v in value):
                bad(key, f"must be a list of positive integers, got {value!r}")
        if not self.lengths:
            bad("lengths", "must not be empty")
        if list(self.lengths) != sorted(set(self.lengths)):
            bad("lengths", "must be increasing")
        if not self.n_values:
            bad("n_values", "must not be empty")
        if not self.separability_n:
            bad("separability_n", "must not be empty")
        length = max(self.lengths)
        for key in ("n_fixed", "plateau_from", "gradient_rows", "mc_samples", "windows", "offset",
                    "bisection_steps", "row_blocks", "seed", "ssmax_length"):
            value = getattr(self, key)
            low = {"gradient_rows": 0, "offset": 0, "seed": 0, "ssmax_length": 2}.get(key, 1)
            if not ints(value) or value < low:
                bad(key, f"must be an integer ≥ {low}, got {value!r}")
        if self.n_fixed >= min(self.lengths):
            bad("n_fixed", f"must be below the smallest length {min(self.lengths)}")
        if max(self.n_values) >= length:
            bad("n_values", f"every N must be below the largest length {length}")
        if max(self.separability_n) >= length:
            bad("separability_n", f"every N must be below the largest length {length}")
        if self.critical_grid and max(self.critical_grid) >= length:
            bad("critical_grid", f"every N must be below the largest length {length}")
        if self.coverage_n and max(self.coverage_n) >= length:
            bad("coverage_n", f"every N must be below the largest length {length}")
        if not 0 < self.coverage_target < 1:
            bad("coverage_target", f"must lie in (0, 1), got {self.coverage_target!r}")
        names = self.normalizers
        if (not isinstance(names, tuple) or not names
                or not all(isinstance(v, str) and v in NORMALIZER_NAMES for v in names)):
            bad("normalizers", f"must be a non-empty list of {', '.join(NORMALIZER_NAMES)}, "
                f"got {names!r}")
        if len(set(names)) != len(names):
            bad("normalizers", f"lists a normalizer twice: {names!r}")
        if not 0 < self.ks_alpha < 1:
            bad("ks_alpha", f"must lie in (0, 1), got {self.ks_alpha!r}")
        if not (self.sphere_radius > 0 and math.isfinite(self.sphere_radius)):
            bad("sphere_radius", "must be positive")
        for key in ("temperatures", "eps"):
            value = getattr(self, key)
            if not value or not all(isinstance(v, (int, float)) and v > 0 and math.isfinite(v)
                                    for v in value):
                bad(key, f"must be a non-empty list of positive numbers, got {value!r}")
        if self.vectors not in ("value", "hidden"):
            bad("vectors", f"must be 'value' or 'hidden', got {self.vectors!r}")
        if self.reading not in ("sum", "norm"):
            bad("reading", f"must be 'sum' or 'norm', got {self.reading!r}")
        if not 0 <= self.rtol < 0.1:
            bad("rtol", f"must lie in [0, 0.1), got {self.rtol!r}")

    @property
    def length(self) -> int:
        """The largest L (the window length)."""
        return max(self.lengths)

    @property
    def grid(self) -> tuple[int, ...]:
        """The N grid of experiment 3."""
        return self.critical_grid or default_critical_grid(self.length)

    def to_dict(self) -> dict[str, Any]:
        return {name: (list(v) if isinstance(v, tuple) else v)
                for name in self.__dataclass_fields__ for v in [getattr(self, name)]}

    def to_toml(self) -> str:
        import tomli_w

        return tomli_w.dumps({"bounds": self.to_dict()})

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> BoundsConfig:
        """Build from a `{key: value}` mapping (the `[bounds]` table); unknown keys are errors."""
        fields = cls.__dataclass_fields__
        kwargs = {}
        for key, value in data.items():
            if key not in fields:
                raise ConfigError(f"bounds.{key}: unknown key (known: {', '.join(fields)})")
            if isinstance(value, list):
                value = tuple(value)
            if key in ("temperatures", "eps") and isinstance(value, tuple):
                value = tuple(float(v) if isinstance(v, (int, float)) and not isinstance(v, bool)
                              else v for v in value)
            if (
                key in ("ks_alpha", "sphere_radius", "rtol", "coverage_target")
                and isinstance(value, int)
                and not isinstance(value, bool)
            ):
                value = float(value)
            kwargs[key] = value
        return cls(**kwargs)

    @classmethod
    def from_toml(cls, text: str, overrides: dict[str, Any] | None = None) -> BoundsConfig:
        """Parse TOML (keys under `[bounds]`, or at top level), then apply `overrides`."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"config: not valid TOML ({err})") from None
        table = data.pop("bounds", {})
        if data:
            extra = [k for k in data if not isinstance(data[k], dict)]
            tables = [k for k in data if isinstance(data[k], dict)]
            if tables:
                raise ConfigError(
                    f"config: unknown table [{tables[0]}] (gpt2 bounds reads [bounds])"
                )
            table = {**{k: data[k] for k in extra}, **table}
        return cls.from_mapping({**table, **(overrides or {})})


def parse_override(item: str) -> tuple[str, Any]:
    """`key=value` (or `bounds.key=value`) with a TOML value (`lengths=[32,64]`, `reading="norm"`;
    bare words are strings)."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
    key, raw = item.split("=", 1)
    key = key.strip()
    if key.startswith("bounds."):
        key = key[len("bounds.") :]
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return key, value
