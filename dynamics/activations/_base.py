"""The activation family: how the heads turn their key logits into attention weights."""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import equinox as eqx
from jaxtyping import Array, Float

from .._errors import ConfigError
from .._registry import Registry


@dataclasses.dataclass(frozen=True)
class SymbolicDefinition:
    """An activation written for the computer-algebra derivation as a ratio
    `A_{hℓ} = numerator(h, ℓ) / normalizer(h)` in index notation.

    **Fields:** `numerator(h, ℓ)` and `normalizer(h)`: callables returning sympy expressions of
    the logits `χ_{hℓ}` and biases `b_h` (built from the namespace that
    [`AbstractActivation.symbolic`][] receives); `latex`: the definition as rendered in
    `docs/equations.md`.
    """

    numerator: Callable[[Any, Any], Any]
    normalizer: Callable[[Any], Any]
    latex: str


class AbstractActivation(eqx.Module):
    """Maps the key logits of all heads to attention weights.

    A concrete activation is one small file: a subclass that sets the class attributes `name`
    (its config value) and `label` (its name in figures), implements `__call__` numerically
    stably for any finite logits (max subtraction), optionally gives its `symbolic` definition
    (needed for `[ode] rhs = "symbolic"` and `docs/equations.md`), and is decorated with
    [`register_activation`][]. The model core only ever calls `__call__`; everything that lists
    activations reads the registry.
    """

    name: eqx.AbstractClassVar[str]
    label: eqx.AbstractClassVar[str]

    @abc.abstractmethod
    def __call__(self, logits: Float[Array, "heads tokens"],
                 bias: Float[Array, " heads"]) -> Float[Array, "heads tokens"]:
        """**Arguments:** `logits` `χ_{hℓ}`, `bias` `b_h`. **Returns:** `A_{hℓ}`."""

    @classmethod
    def symbolic(cls, s: Any) -> SymbolicDefinition | None:
        """The definition for the symbolic derivation, or None when there is none.

        **Arguments:** `s`, a namespace of sympy objects provided by `headflow.dynamics.symbolic`:
        `s.chi[h, ℓ]` and `s.b[h]` (logits and biases), `s.exp`, and
        `s.sum(fn, over)` that sums `fn(i, …)` over fresh indices of the kinds in `over`
        (`("token",)` or `("head", "token")`).
        """
        del s
        return None


_REGISTRY: Registry[type[AbstractActivation]] = Registry("activation", "name")

_A = TypeVar("_A", bound=type[AbstractActivation])


def register_activation(cls: _A) -> _A:
    """Class decorator: make `cls` available under `cls.name` in configs, the CLI, figures and
    the symbolic derivation."""
    _REGISTRY.register(cls)
    return cls


def unregister_activation(name: str) -> None:
    """Remove a registered activation (tests that register temporary ones)."""
    _REGISTRY.unregister(name)


def activation_names() -> tuple[str, ...]:
    """The registered activations, in registration order."""
    return _REGISTRY.names()


def activation_class(name: str) -> type[AbstractActivation]:
    """The class registered under `name`; a [`ConfigError`][] naming `model.activation`
    otherwise."""
    return _REGISTRY.get(name, lambda msg: ConfigError(f"model.activation = {msg}"))


def get_activation(name: str) -> AbstractActivation:
    """An instance of the activation registered under `name` (e.g. `"softmax"`)."""
    return activation_class(name)()


def activation_color(name: str) -> str:
    """A matplotlib color per activation, stable in registration order (`"C0"`, `"C1"`, …)."""
    names = activation_names()
    return f"C{names.index(name) % 10}" if name in names else "C7"
