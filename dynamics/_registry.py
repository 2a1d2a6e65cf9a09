"""Named families of interchangeable parts (activations, priors): one registry each.

A part is one class in one file, decorated with its family's `register_*` function. Everything
that lists the members of a family (config validation, CLI choices and help, plot styles, the
symbolic derivation, test parametrizations) asks the registry, so adding a member touches no
other file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """An ordered name → class table.

    **Arguments:** `family`: the kind of part, for error messages (e.g. `"activation"`);
    `key`: the class attribute that holds a member's name (e.g. `"name"`).
    """

    def __init__(self, family: str, key: str):
        self.family = family
        self.key = key
        self._table: dict[str, T] = {}

    def register(self, cls: T) -> T:
        """Add `cls` under its name (a class decorator). Re-registering a name replaces it."""
        name = getattr(cls, self.key)
        if not isinstance(name, str) or not name:
            raise TypeError(f"{cls!r}: a {self.family} needs a non-empty string `{self.key}`")
        self._table[name] = cls
        return cls

    def unregister(self, name: str) -> None:
        """Remove the member `name` (for tests that register temporary members)."""
        self._table.pop(name, None)

    def names(self) -> tuple[str, ...]:
        """Member names in registration order."""
        return tuple(self._table)

    def get(self, name: str, error: Callable[[str], Exception]) -> T:
        """The member `name`; `error(message)` is raised when there is none."""
        try:
            return self._table[name]
        except (KeyError, TypeError):
            raise error(f"{name!r}: unknown {self.family}; choose one of "
                        f"{', '.join(map(repr, self._table))}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._table

    def __iter__(self) -> Iterator[T]:
        return iter(self._table.values())
