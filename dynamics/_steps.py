"""SGD step sizes: one object shared by the simulator and the theory."""

from __future__ import annotations

from typing import Any

import equinox as eqx
from jaxtyping import Array, Float

from ._schedule import Schedule


class StepSizes(eqx.Module):
    """The step sizes of online SGD, as the simulator applies them and the ODEs see them
    (`docs/model.md#training-online-sgd`):

    - `lr`: `η` on keys and values;
    - `lr_bias`: `η_b` (each step moves the biases by `η_b/D` times their gradient);
    - `weight_decay`: `λ` (each step multiplies keys and values by `1 − ηλ/D`);
    - `batch`: `B`, the mini-batch size (the loss is averaged over it);
    - `lr_schedule`, `lr_bias_schedule`: optional [`headflow.dynamics.Schedule`][]s `η(t)`,
      `η_b(t)`; where set, they replace `lr`, `lr_bias` at every time (`docs/differentiable.md`).

    Whoever applies the step sizes at time `t` (`t = k/D` at SGD step `k`, the integration time
    in the ODEs) reads them from [`at`][], so theory and simulation see the same schedule.
    """

    lr: Any
    lr_bias: Any
    weight_decay: Any = 0.0
    batch: int = eqx.field(static=True, default=1)
    lr_schedule: Schedule | None = None
    lr_bias_schedule: Schedule | None = None

    @property
    def scheduled(self) -> bool:
        """Whether a step size depends on time."""
        return self.lr_schedule is not None or self.lr_bias_schedule is not None

    @property
    def knot_times(self) -> tuple[float, ...]:
        """The knot times of the schedules (where the step sizes have kinks)."""
        return tuple(t for s in (self.lr_schedule, self.lr_bias_schedule) if s is not None
                     for t in s.times)

    def at(self, t: Float[Array, ""] | float) -> StepSizes:
        """The step sizes at time `t` (in `steps/D`), with no schedule left; `self` itself when
        nothing is scheduled (so constant step sizes give bit-identical programs)."""
        if not self.scheduled:
            return self
        lr = self.lr if self.lr_schedule is None else self.lr_schedule(t)
        lr_bias = self.lr_bias if self.lr_bias_schedule is None else self.lr_bias_schedule(t)
        return StepSizes(lr=lr, lr_bias=lr_bias, weight_decay=self.weight_decay,
                         batch=self.batch)

    @classmethod
    def from_config(cls, training: Any) -> StepSizes:
        """From the `[training]` table of a [`headflow.dynamics.Config`][] (with the schedules
        of the weights' and the scalar parameters' steps when it sets them)."""
        schedules = {}
        for name, table in (("lr_schedule", training.lr_schedule),
                            ("lr_bias_schedule", training.scalar_schedule())):
            if table is not None:
                schedules[name] = Schedule.from_table(f"training.{name}", table)
        return cls(lr=training.lr, lr_bias=training.scalar_step(),
                   weight_decay=training.weight_decay, batch=int(training.batch), **schedules)
