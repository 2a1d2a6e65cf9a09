"""Learning-rate schedules: one object read by the ODEs and by both SGD simulators."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._errors import ConfigError

SCHEDULE_KINDS = ("linear", "log")
"""`"linear"`: piecewise linear in `t`; `"log"`: piecewise linear in `log t`."""


class Schedule(eqx.Module):
    """A step size `η(t)` that is piecewise linear on K knots, in `t` (`kind = "linear"`) or in
    `log t` (`kind = "log"`), and constant before the first knot and after the last one.

    `t` is the time of online SGD in `steps/D`. The simulators apply `η(k/D)` at step `k`, and
    the ODEs use `η(t)` at the integration time `t`, both through
    [`headflow.dynamics.StepSizes.at`][]. The knot `values` are the only pytree leaf, so the
    schedule is differentiable in them. The knot `times` are static: a new set of times is a new
    program.

    **Fields:** `times` (K increasing times ≥ 0; > 0 for `"log"`), `values` (K step sizes ≥ 0),
    `kind`.
    """

    values: Float[ArrayLike, " K"]
    times: tuple[float, ...] = eqx.field(static=True)
    kind: str = eqx.field(static=True, default="linear")

    def __call__(self, t: Float[Array, ""] | float) -> Float[Array, ""]:
        """`η(t)`: linear interpolation between the knots (in `log t` for `"log"`), the end
        values outside them."""
        xp = np.asarray(self.times, dtype=np.float64)
        x = jnp.asarray(t, dtype=jnp.result_type(float))
        if self.kind == "log":
            # clamped below the first knot before the log: no log(0), and η is flat there
            xp = np.log(xp)
            x = jnp.log(jnp.maximum(x, self.times[0]))
        if len(self.times) == 1:
            return jnp.asarray(self.values)[0] + 0.0 * x
        return jnp.interp(x, jnp.asarray(xp, x.dtype), jnp.asarray(self.values))

    def with_values(self, values: Float[ArrayLike, " K"]) -> Schedule:
        """The same knots with other values (e.g. traced ones, to differentiate)."""
        return Schedule(values=values, times=self.times, kind=self.kind)

    def to_table(self) -> dict[str, Any]:
        """The config table `{kind, times, values}` (what `[training] lr_schedule` holds)."""
        return {"kind": self.kind, "times": [float(t) for t in self.times],
                "values": [float(v) for v in np.asarray(self.values)]}

    @classmethod
    def constant(cls, value: float) -> Schedule:
        """The trivial schedule: `η(t) = value`."""
        return cls(values=np.asarray([float(value)]), times=(0.0,))

    @classmethod
    def from_table(cls, key: str, table: Mapping[str, Any]) -> Schedule:
        """A schedule from its config table `{kind = "linear" | "log", times = [...],
        values = [...]}`, validated; problems are one-line [`headflow.dynamics.ConfigError`][]s
        naming `key` (e.g. `training.lr_schedule`)."""
        if not isinstance(table, Mapping):
            raise ConfigError(f"{key} = {table!r}: must be a table {{kind = \"linear\" | "
                              "\"log\", times = [...], values = [...]}")
        unknown = sorted(set(table) - {"kind", "times", "values"})
        if unknown:
            raise ConfigError(f"{key}: unknown key(s) {', '.join(unknown)}; a schedule has "
                              "kind, times and values")
        kind = table.get("kind", "linear")
        if kind not in SCHEDULE_KINDS:
            raise ConfigError(f"{key}.kind = {kind!r}: choose one of "
                              f"{', '.join(map(repr, SCHEDULE_KINDS))}")
        for part in ("times", "values"):
            if part not in table:
                raise ConfigError(f"{key}.{part} is required (a list of numbers, one per knot)")
        times = _numbers(f"{key}.times", table["times"])
        values = _numbers(f"{key}.values", table["values"])
        if len(times) != len(values):
            raise ConfigError(f"{key}: {len(times)} times but {len(values)} values (one value "
                              "per knot)")
        if any(b <= a for a, b in zip(times, times[1:])):
            raise ConfigError(f"{key}.times = {times}: must be strictly increasing")
        low = 0.0 if kind == "linear" else math.nextafter(0.0, 1.0)
        if times[0] < low:
            raise ConfigError(f"{key}.times: must be {'>= 0' if kind == 'linear' else '> 0'}"
                              f" for kind = {kind!r} (got {times[0]:g})")
        if min(values) < 0:
            raise ConfigError(f"{key}.values: step sizes must be >= 0 (got {min(values):g})")
        return cls(values=np.asarray(values, dtype=np.float64), times=tuple(times), kind=kind)


def _numbers(key: str, value: Any) -> list[float]:
    if (not isinstance(value, Sequence) or isinstance(value, str) or not value
            or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value)):
        raise ConfigError(f"{key} = {value!r}: must be a non-empty list of numbers")
    out = [float(v) for v in value]
    if not all(math.isfinite(v) for v in out):
        raise ConfigError(f"{key}: entries must be finite")
    return out
