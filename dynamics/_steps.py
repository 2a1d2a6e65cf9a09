"""SGD step sizes: one object shared by the simulator and the theory."""

from __future__ import annotations

from typing import Any

import equinox as eqx


class StepSizes(eqx.Module):
    """The step sizes of online SGD, as the simulator applies them and the ODEs see them
    (`docs/model.md#training-online-sgd`):

    - `lr`: `η` on keys and values;
    - `lr_bias`: `η_b` (each step moves the biases by `η_b/D` times their gradient);
    - `weight_decay`: `λ` (each step multiplies keys and values by `1 − ηλ/D`);
    - `batch`: `B`, the mini-batch size (the loss is averaged over it).
    """

    lr: Any
    lr_bias: Any
    weight_decay: Any = 0.0
    batch: int = eqx.field(static=True, default=1)

    @classmethod
    def from_config(cls, training: Any) -> StepSizes:
        """From the `[training]` table of a [`dynamics.Config`][]."""
        return cls(lr=training.lr, lr_bias=training.lr_bias,
                   weight_decay=training.weight_decay, batch=int(training.batch))
