"""The attention model's config tables: `[model]` ([`ModelSection`][]) and `[training]`
([`TrainingSection`][]); its `[prior]` is the generic
[`headflow.dynamics.config.PriorSection`][] of the registered priors."""

from __future__ import annotations

import dataclasses

from ..._schedule import Schedule
from ...activations import activation_class
from ...config import _at_least, _finite, _positive


@dataclasses.dataclass(frozen=True)
class ModelSection:
    """`[model]` of the attention model (`kind = "attention"`, the default kind): `L` tokens,
    `H` heads, `F` latent directions, the `activation`'s name, the label noise `noise` (Δ),
    `rho` (`|v*|²/D`), `train_values`."""

    kind: str = "attention"
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
        activation_class(self.activation)  # raises with the list of choices
        _at_least("model.noise", self.noise, 0.0)
        _positive("model.rho", self.rho)


@dataclasses.dataclass(frozen=True)
class TrainingSection:
    """`[training]` of the attention model: the step sizes of the weights (`lr`) and of the
    biases (`lr_bias`, its own value), the weight decay, the batch, the initial scales of keys,
    values and biases, `t_max`, and the schedules that replace the step sizes."""

    lr: float = 1.0
    lr_bias: float = 1.0
    weight_decay: float = 0.0
    batch: int = 1
    init_key_std: float = 0.1
    init_value_std: float = 0.1
    init_bias: float = 0.0
    t_max: float = 100.0
    lr_schedule: dict | None = None       # {kind = "linear" | "log", times, values}: η(t),
    lr_bias_schedule: dict | None = None  # η_b(t) (replace lr, lr_bias; docs/differentiable.md)

    def validate(self) -> None:
        _at_least("training.lr", self.lr, 0.0)
        _at_least("training.lr_bias", self.lr_bias, 0.0)
        _at_least("training.weight_decay", self.weight_decay, 0.0)
        _at_least("training.batch", self.batch, 1)
        _at_least("training.init_key_std", self.init_key_std, 0.0)
        _at_least("training.init_value_std", self.init_value_std, 0.0)
        _finite("training.init_bias", self.init_bias)
        _positive("training.t_max", self.t_max)
        for name in ("lr_schedule", "lr_bias_schedule"):
            if getattr(self, name) is not None:
                Schedule.from_table(f"training.{name}", getattr(self, name))
