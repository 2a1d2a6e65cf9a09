"""Models from the user's own code (`docs/models.md#adding-a-model`): `[model] kind` names a
registered model (`"committee"`), a model registered by an installed package under the
entry-point group `headflow.models`, a file (`"path/to/file.py:ClassName"`, relative to the
config file) or an importable module (`"package.module:ClassName"`)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from .. import _kinds
from .._errors import ConfigError
from .._kinds import ENTRY_POINTS as ENTRY_POINTS
from .._kinds import is_file_target
from .._kinds import plugin_entry_points as plugin_entry_points

_FILES: dict[Path, tuple[tuple[int, int], Any]] = {}


def resolve_kind(kind: str, base: Path | None) -> str:
    """`kind` with a relative file path made absolute against `base` (the config file's
    folder; None: the working directory); other kinds unchanged; a one-line [`ConfigError`][]
    for a class part that is no Python name."""
    try:
        return _kinds.resolve_kind(kind, base)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def split_kind(kind: str) -> tuple[str, str] | None:
    """`(file or module, class name)` of a `kind` that names code (`"a/b.py:C"`,
    `"pkg.mod:C"`); None for a plain name; a one-line [`ConfigError`][] for a class part that
    is no Python name."""
    try:
        return _kinds.split_kind(kind)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _load_file(path: Path, kind: str) -> Any:
    """The module of a model file, executed again only when the file changed."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"model.kind = {kind!r}: file {path} not found") from None
    if not path.is_file():
        raise ConfigError(f"model.kind = {kind!r}: {path} is not a file")
    stamp = (stat.st_mtime_ns, stat.st_size)
    cached = _FILES.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    name = "headflow_user_model_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"model.kind = {kind!r}: {path} cannot be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module              # dataclasses and type hints look modules up here
    try:
        spec.loader.exec_module(module)
    except ConfigError:
        raise
    except Exception as err:                # noqa: BLE001 - the user's code: one line
        sys.modules.pop(name, None)
        where = ""
        if isinstance(err, SyntaxError) and err.lineno is not None:
            where = f" (line {err.lineno})"
        raise ConfigError(f"model.kind = {kind!r}: loading {path} failed: "
                          f"{type(err).__name__}: {err}{where}".replace("\n", " ")) from None
    _FILES[path] = (stamp, module)
    return module


def _load_module(target: str, kind: str) -> Any:
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as err:
        raise ConfigError(f"model.kind = {kind!r}: no module named {err.name!r}") from None
    except Exception as err:                # noqa: BLE001 - the user's code: one line
        raise ConfigError(f"model.kind = {kind!r}: importing {target} failed: "
                          f"{type(err).__name__}: {err}".replace("\n", " ")) from None


def check_model_class(cls: Any, kind: str, base: type) -> Any:
    """`cls` if it is a concrete subclass of `base` (the model family's
    `AbstractModel`); a one-line [`ConfigError`][] otherwise (not a subclass, a method it must
    implement missing, no `kind`)."""
    if not (inspect.isclass(cls) and issubclass(cls, base)):
        raise ConfigError(f"model.kind = {kind!r}: {getattr(cls, '__name__', cls)!r} is not "
                          "a subclass of headflow.dynamics.models.AbstractModel")
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        raise ConfigError(f"model.kind = {kind!r}: {cls.__name__} does not implement "
                          f"{', '.join(missing)}")
    name = getattr(cls, "kind", None)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"model.kind = {kind!r}: {cls.__name__} must set its name, "
                          "`kind: ClassVar[str] = \"...\"`")
    return cls


def load_code_model(kind: str, base: type) -> type:
    """The model class (a subclass of `base`) named by a `file.py:Class` or `module:Class`
    kind."""
    parts = split_kind(kind)
    assert parts is not None
    target, name = parts
    if is_file_target(target):
        module = _load_file(Path(target).expanduser().resolve(), kind)
    else:
        module = _load_module(target, kind)
    if not hasattr(module, name):
        defined = sorted(k for k, v in vars(module).items()
                         if inspect.isclass(v) and v.__module__ == module.__name__)
        raise ConfigError(f"model.kind = {kind!r}: {target} has no class {name!r}"
                          + (f" (it defines {', '.join(defined)})" if defined else ""))
    return check_model_class(getattr(module, name), kind, base)


def load_plugin(kind: str, ep: metadata.EntryPoint, base: type) -> type:
    """The model class (a subclass of `base`) of an entry point."""
    try:
        cls = ep.load()
    except Exception as err:                # noqa: BLE001 - the plugin's code: one line
        raise ConfigError(f"model.kind = {kind!r}: loading the entry point {ep.value} "
                          f"failed: {type(err).__name__}: {err}".replace("\n", " ")) from None
    return check_model_class(cls, kind, base)
