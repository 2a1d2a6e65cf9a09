"""Compiled programs kept between processes as `jax.export` artifacts: set by
[`set_export_cache`][] (the `headflow` command line's caches turn it on), used by
[`compile_exported`][] (the ODE's solve) and [`call_exported`][] (the risk and the field's
error along a trajectory).

JAX's persistent compilation cache already skips XLA's compilation of a program it has seen,
but a fresh process still traces and lowers the program first (about 1.5 s for a committee's
solve, 3 s for the attention model's). An exported program is stored already lowered: a later
process with a structurally equal problem (other values of the same arrays: a learning rate,
the label noise, a start) deserializes it and compiles only its call, which the compilation
cache then reads back.

The key of a stored program is everything the program is made of apart from the array values:
the function (by its module and name), the tree structure of the arguments with every static
field, each node's class (module and name), each non-array leaf (a module-level function or
class by its module and name), the shapes and dtypes of the arrays, the source files of the code
the program can come from (`headflow.dynamics`, the modules defining the nodes' classes, and
every loaded module outside the Python installation, where a user's model lives), the versions
of the numerical packages, JAX's numerical settings and the platform. A change to any of them is
another key: the program is traced again and stored beside the old one. (A helper module of an
installed model package, called by the model but defining none of its classes, is not in the
key: reinstalling such a package needs `headflow --no-cache` once, or a fresh cache folder.)

`jax.export` cannot store a program that contains host callbacks, which equinox's run-time
checks are by default (`EQX_ON_ERROR=raise`); the command line sets `EQX_ON_ERROR=nan`
(`headflow.validation`), and elsewhere the export cache is used only when that variable says
the checks compile to no callbacks.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np

_FOLDER: list[Path | None] = [None]
_VERSION = "1"                       # of the key's layout and of the stored calling convention
_PACKAGES = ("jax", "jaxlib", "equinox", "diffrax", "lineax", "optimistix", "numpy")
_FILES: dict[str, tuple[int, int, str]] = {}      # path -> (mtime_ns, size, digest)
_LOADED: dict[str, Any] = {}                       # key -> compiled call (None: not exported)
_JITTED: dict[Callable, Any] = {}                  # fn -> equinox.filter_jit(fn)
_SOURCES: list[tuple[Any, list[str]]] = []         # the last (modules memo, source files)


def set_export_cache(folder: str | Path | None) -> None:
    """Keep exported programs in `folder` between processes (None: off, the default)."""
    _FOLDER[0] = None if folder is None else Path(folder)


def export_cache() -> Path | None:
    """The folder of [`set_export_cache`][] when programs can be exported in this process
    (None: off, or equinox's checks compile to host callbacks)."""
    if os.environ.get("EQX_ON_ERROR", "raise") not in ("nan", "off"):
        return None
    return _FOLDER[0]


def compile_exported(fn: Callable, *args: Any) -> Callable[..., Any]:
    """`fn` compiled for `args` (a pytree; its arrays are the program's arguments, everything
    else is part of the program): a callable of arguments of the same structure, returning what
    `fn` returns. `fn` must be a module-level function returning a tree of tuples, lists and
    arrays only (the stored program's output structure).

    With the export cache on ([`export_cache`][]) the program is read from it (once per
    process), or traced, exported and stored there first. Otherwise, and where the export
    fails, it is `equinox.filter_jit(fn)` lowered and compiled, whose traces this process
    reuses for arguments that differ only in array values."""
    dyn, static = eqx.partition(args, eqx.is_array)
    leaves, tree = jax.tree.flatten(dyn)

    def call_with(compiled: Any) -> Callable[..., Any]:
        return lambda *a: compiled(jax.tree.leaves(eqx.filter(a, eqx.is_array)))

    folder = export_cache()
    if folder is not None:
        key = program_key(fn, args)
        if key not in _LOADED:
            _LOADED[key] = _load_or_export(fn, folder / key, leaves, tree, static)
        if _LOADED[key] is not None:
            return call_with(_LOADED[key])
    if fn not in _JITTED:
        _JITTED[fn] = eqx.filter_jit(fn)
    return _JITTED[fn].lower(*args).compile()


def call_exported(fn: Callable, *args: Any) -> Any:
    """`fn(*args)`. With the export cache on ([`export_cache`][]) and one device it runs `fn`'s
    program for the structure of `args` read from the cache, or exported there first
    ([`compile_exported`][]), so that a later process with other values loads it instead of
    tracing it; otherwise (several devices, whose arguments may be sharded) it is the plain
    call. `fn`: a module-level function (jitted with `equinox.filter_jit`, for the plain call)
    returning a tree of tuples, lists and arrays only."""
    if export_cache() is None or jax.device_count() > 1:
        return fn(*args)
    return compile_exported(fn, *args)(*args)


def _load_or_export(fn: Callable, stem: Path, leaves: list, tree: Any, static: Any) -> Any:
    """The compiled call of the program stored at `stem.jax_exported`, or of `fn`'s program
    exported and stored there now; None where it cannot be exported (no serializer; host
    callbacks, such as a progress bar's, for which `stem.not_exported` is written so that a
    later process does not trace it in vain)."""
    path, refused = stem.with_suffix(".jax_exported"), stem.with_suffix(".not_exported")
    if refused.is_file():
        return None
    exported = _read(path)
    if exported is None:
        def flat(leaves: list) -> Any:
            return fn(*eqx.combine(jax.tree.unflatten(tree, leaves), static))

        try:
            specs = [jax.ShapeDtypeStruct(np.shape(x), _dtype(x)) for x in leaves]
            exported = jax.export.export(jax.jit(flat))(specs)
            data = exported.serialize()
        except NotImplementedError:                    # host callbacks
            write_atomically(refused, b"")
            return None
        except ImportError:                            # no flatbuffers
            return None
        write_atomically(path, data)
    return jax.jit(exported.call).lower(leaves).compile()


def program_key(fn: Callable, args: Any) -> str:
    """The key of the program of `fn` for `args` (see the module's description)."""
    h = hashlib.sha256(f"headflow-exported-{_VERSION};".encode())
    h.update(f"function {_describe(fn)};".encode())
    dyn, static = eqx.partition(args, eqx.is_array)
    h.update(str(jax.tree.structure(static)).encode())
    classes: set[type] = set()

    def record(node: Any) -> bool:                  # every node's class; never a leaf
        classes.add(type(node))
        return False

    jax.tree.leaves(args, is_leaf=record)
    for cls in sorted(classes, key=_name):
        h.update(f"class {_name(cls)};".encode())
    for leaf in jax.tree.leaves(static):
        h.update(f"leaf {_describe(leaf)};".encode())
    for leaf in jax.tree.leaves(dyn):
        h.update(f"array {np.shape(leaf)} {_dtype(leaf)} {_weak(leaf)};".encode())
    h.update(package_versions(_PACKAGES).encode())
    for option in ("jax_enable_x64", "jax_disable_most_optimizations",
                   "jax_default_matmul_precision", "jax_numpy_rank_promotion"):
        h.update(f"{option}={jax.config.values.get(option)!r};".encode())
    for name in sorted(os.environ):
        if name.startswith(("XLA_", "EQX_")):
            h.update(f"{name}={os.environ[name]};".encode())
    device = jax.devices()[0]
    h.update(f"{device.platform} {device.device_kind} {jax.device_count()};".encode())
    for path in _source_files(classes):
        h.update(f"{path}={file_digest(path)};".encode())
    return h.hexdigest()[:40]


@functools.cache
def package_versions(names: tuple[str, ...]) -> str:
    """`name=version;` for each package of `names` (`-` where it is not installed): part of
    the keys of what is stored between processes. Read once per process (a package installed
    over the running one is not what the process has imported)."""
    out = []
    for name in names:
        try:
            out.append(f"{name}={metadata.version(name)};")
        except metadata.PackageNotFoundError:
            out.append(f"{name}=-;")
    return "".join(out)


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _describe(leaf: Any) -> str:
    """A non-array leaf as text that is the same in every process: a function or class that
    its module's attribute path leads back to (a module-level definition, whose source file is
    in the key) by that path, anything else by `repr`. A closure, a bound method, generated
    code or an object whose `repr` shows its address then keys its program to this process
    only, which is safe."""
    if callable(leaf) and _importable(leaf):
        return f"{type(leaf).__name__} {leaf.__module__}:{leaf.__qualname__}"
    return f"{type(leaf).__name__} {leaf!r}"


def _importable(obj: Any) -> bool:
    """Whether `obj` is `module.a.b` for its own `__module__` and `__qualname__` `a.b`."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    found: Any = module
    for part in str(getattr(obj, "__qualname__", "<locals>")).split("."):
        found = getattr(found, part, None)
    return module is not None and found is obj


def _dtype(leaf: Any) -> Any:
    return leaf.dtype if hasattr(leaf, "dtype") else np.result_type(leaf)


def _weak(leaf: Any) -> bool:
    return bool(getattr(leaf, "weak_type", False))


def _source_files(classes: set[type]) -> list[str]:
    """The files the program's code can come from: `headflow.dynamics`'s sources, the modules
    that define the classes of the arguments' nodes (a model installed as a package), and every
    loaded module outside the Python installation (the user's model files, an editable
    install)."""
    defining = frozenset(cls.__module__ for cls in classes)
    memo = (len(sys.modules), defining)               # the same modules loaded: the same files
    if _SOURCES and _SOURCES[0][0] == memo:
        return _SOURCES[0][1]
    installed = {str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix,
                                                   sysconfig.get_paths()["purelib"],
                                                   sysconfig.get_paths()["platlib"])}
    files = {str(p) for p in Path(__file__).resolve().parent.rglob("*.py")}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or not file.endswith(".py"):
            continue
        resolved = str(Path(file).resolve())
        if name in defining or not any(resolved.startswith(prefix + os.sep)
                                       for prefix in installed):
            files.add(resolved)
    _SOURCES[:] = [(memo, sorted(files))]
    return _SOURCES[0][1]


def file_digest(path: str) -> str:
    """The SHA-256 of the file at `path` ('-' when unreadable), read again only when its
    modification time or size changed."""
    try:
        stat = os.stat(path)
    except OSError:
        return "-"
    known = _FILES.get(path)
    if known is not None and known[:2] == (stat.st_mtime_ns, stat.st_size):
        return known[2]
    try:
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "-"
    _FILES[path] = (stat.st_mtime_ns, stat.st_size, digest)
    return digest


def _read(path: Path) -> Any:
    """The exported program stored at `path` (None: none, or unreadable)."""
    if not path.is_file():
        return None
    try:
        return jax.export.deserialize(bytearray(path.read_bytes()))
    except Exception:                    # a damaged entry is traced and stored again
        return None


def write_atomically(path: Path, data: bytes | bytearray) -> None:
    """Store `data` at `path` through a temporary file (silently nothing when the folder cannot
    be written: a cache is never a reason to fail)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(bytes(data))
        os.replace(tmp, path)
    except OSError:
        return
