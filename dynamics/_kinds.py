"""How `[model] kind` names a model, and which source files a named model's results depend on.

Standard library only, and no import of headflow: the results cache
(`headflow.validation._results`) loads this file to key a run before anything heavy is
imported, and the model loader (`headflow.dynamics.models`) uses the same rules.
"""

from __future__ import annotations

import importlib.util
from importlib import metadata
from pathlib import Path

ENTRY_POINTS = "headflow.models"
"""The entry-point group under which a package registers its models by name."""


def split_kind(kind: str) -> tuple[str, str] | None:
    """`(file or module, class name)` of a `kind` that names code (`"a/b.py:C"`,
    `"pkg.mod:C"`); None for a plain name. A `ValueError` for a class part that is no
    Python name."""
    target, sep, name = kind.rpartition(":")
    if not sep or not target:
        return None
    if not name.isidentifier():
        raise ValueError(f"model.kind = {kind!r}: expected FILE.py:ClassName or "
                         "package.module:ClassName")
    return target, name


def is_file_target(target: str) -> bool:
    """Whether the code part of a kind is a file path (rather than a module name)."""
    return target.endswith(".py") or "/" in target or "\\" in target


def resolve_path(target: str, base: Path | None) -> Path:
    """The absolute path of a file target, a relative one read against `base` (the config
    file's folder; None: the working directory)."""
    path = Path(target).expanduser()
    if not path.is_absolute():
        path = (base if base is not None else Path.cwd()) / path
    return path.resolve()


def resolve_kind(kind: str, base: Path | None) -> str:
    """`kind` with a relative file path made absolute (`resolve_path`); other kinds
    unchanged."""
    parts = split_kind(kind) if isinstance(kind, str) else None
    if parts is None or not is_file_target(parts[0]):
        return kind
    return f"{resolve_path(parts[0], base)}:{parts[1]}"


def plugin_entry_points() -> dict[str, metadata.EntryPoint]:
    """The models installed packages register (entry-point group `headflow.models`), by
    name."""
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINTS)}


def _package_files(module: str) -> list[Path]:
    """Every `.py` file of the top-level package of `module`, located without importing it."""
    spec = importlib.util.find_spec(module.split(".")[0])
    if spec is None:
        raise OSError(f"no module {module}")
    if spec.submodule_search_locations:
        return sorted(p for loc in spec.submodule_search_locations
                      for p in Path(loc).rglob("*.py"))
    if spec.origin is None:
        raise OSError(f"no file for {module}")
    return [Path(spec.origin)]


def kind_sources(kind: str, base: Path | None) -> list[Path]:
    """The source files outside headflow that the model `kind` names: for `file.py:Class`,
    the file and every `.py` file beside it; for `package.module:Class` or an entry point, every
    `.py` file of the top-level package; none for any other name (a model headflow defines or
    registers in the process). `OSError` or `ValueError` when they cannot be located."""
    parts = split_kind(kind)
    if parts is None:
        ep = plugin_entry_points().get(kind)
        if ep is None:
            return []
        target = ep.value.partition(":")[0].strip()
    else:
        target = parts[0]
    if not is_file_target(target):
        return _package_files(target)
    path = resolve_path(target, base)
    return [path, *sorted(p.resolve() for p in path.parent.glob("*.py")
                          if p.resolve() != path)]
