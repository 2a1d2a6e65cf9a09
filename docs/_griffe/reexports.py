"""Griffe extension for the API reference: a name imported as itself (`from ._x import y as y`,
the explicit re-export of PEP 484, which mypy also honours) is public, so the reference shows
each object under the package that exports it."""

from __future__ import annotations

import ast
from typing import Any

import griffe


class ExplicitReexports(griffe.Extension):
    def on_alias_instance(self, *, node: Any, alias: griffe.Alias, **kwargs: Any) -> None:
        if isinstance(node, ast.ImportFrom) and any(
            name.asname == name.name == alias.name for name in node.names
        ):
            alias.public = True
