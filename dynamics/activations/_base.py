"""The activation family: how a head turns logits into attention weights."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TypeVar

import equinox as eqx
from jaxtyping import Array, Float

from .._errors import ConfigError


class AbstractActivation(eqx.Module):
    """Maps the key logits of all heads to attention weights.

    Subclasses implement `__call__(logits, bias)`, numerically stable for any finite logits
    (max subtraction), and set the class attribute `name` (the config value).
    The model core only ever calls this method, so a new activation is one small file that
    subclasses this and is decorated with [`register_activation`][].
    """

    name: eqx.AbstractClassVar[str]

    @abc.abstractmethod
    def __call__(self, logits: Float[Array, "heads tokens"],
                 bias: Float[Array, " heads"]) -> Float[Array, "heads tokens"]:
        """**Arguments:** `logits` `χ_{hℓ}`, `bias` `b_h`. **Returns:** `A_{hℓ}`."""


_REGISTRY: dict[str, type[AbstractActivation]] = {}

_A = TypeVar("_A", bound=type[AbstractActivation])


def register_activation(cls: _A) -> _A:
    """Class decorator: make `cls` available under `cls.name` in configs."""
    _REGISTRY[cls.name] = cls
    return cls


def activation_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def get_activation(name: str) -> AbstractActivation:
    """The activation registered under `name` (e.g. `"softmax"`)."""
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise ConfigError(f"model.activation = {name!r}: unknown activation; choose one of "
                          f"{', '.join(map(repr, _REGISTRY))}") from None


ActivationFactory = Callable[[], AbstractActivation]
