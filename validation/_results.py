"""The results cache: a command repeated with the same inputs copies its earlier result folder
instead of starting JAX.

A run of a command that opts in (`set_defaults(replay=True)`; `headflow ode`) stores its result
folder and its summary under `<cache root>/results/<key>`
([`headflow.validation._cache.cache_root`][]). The key hashes everything the result depends on: the
command, its arguments (the config file's bytes rather than its name, `--set` in order, every other
option but `--out`, `--force`, `--json`), the headflow sources (`dynamics`, `sims`, `validation`),
the versions of the numerical packages and the `JAX_*`, `XLA_*` and `EQX_*` environment. A repeated
run with the same key copies that folder to its `--out` (atomically, `meta.json` marking the copy)
and never imports JAX, the theory or matplotlib. `--no-cache` or `HEADFLOW_CACHE=0` turns it off
with the other caches; anything unusual (an `--out` that is refused, `--check`, `jax.distributed`, a
missing or damaged entry) falls back to the full run, which reports it.

Standard library only: this module runs before anything heavy is imported.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import shutil
import tempfile
import tomllib
from importlib import metadata
from pathlib import Path

from ._cache import cache_root
from .commands._light import dynamics_module

_PACKAGES = ("jax", "jaxlib", "diffrax", "equinox", "optimistix", "lineax", "numpy", "scipy",
             "sympy", "matplotlib")
_SOURCES = ("dynamics", "sims", "validation")
_IGNORED = ("out", "force", "json", "func", "replay", "no_cache")
_ENV = ("JAX_", "XLA_", "EQX_")
SUMMARY = ".summary.json"
"""The command's summary, stored next to the result files in a cache entry."""


def enabled(args: argparse.Namespace) -> bool:
    """Whether this run may use the results cache (the command opts in; no cache switch off;
    no `--check`, no `jax.distributed`)."""
    if not getattr(args, "replay", False) or getattr(args, "no_cache", False):
        return False
    if os.environ.get("HEADFLOW_CACHE", "1").strip().lower() in ("0", "off", "false", "no"):
        return False
    if getattr(args, "check", False):
        return False
    return not any(getattr(args, k, None) for k in ("distributed", "coordinator",
                                                     "num_processes", "process_id"))


def _sources_digest(h) -> None:
    root = Path(__file__).resolve().parents[1]
    for package in _SOURCES:
        for path in sorted((root / package).rglob("*")):
            if path.suffix in (".py", ".toml") and path.is_file():
                h.update(str(path.relative_to(root)).encode())
                h.update(path.read_bytes())


def _model_kind(args: argparse.Namespace) -> tuple[str, Path | None]:
    """`[model] kind` of the run (the config file's, then `--set`'s; `"attention"` when
    unset) and the folder a relative file kind is read from."""
    kind: object = "attention"
    base: Path | None = None
    config = getattr(args, "config", None)
    if config is not None:
        data = tomllib.loads(Path(config).read_text())
        kind = data.get("model", {}).get("kind", kind)
        base = Path(config).resolve().parent
    for item in getattr(args, "set", None) or ():
        dotted, _, text = str(item).partition("=")
        if dotted.strip() == "model.kind":
            try:
                kind = tomllib.loads(f"v = {text.strip()}")["v"]
            except tomllib.TOMLDecodeError:
                kind = text.strip()
            base = None
    return str(kind), base


def model_sources(args: argparse.Namespace) -> list[Path]:
    """The files of the model's code outside headflow that a run of `args` depends on (empty
    for a built-in kind), by the loader's own rules (`headflow.dynamics._kinds.kind_sources`,
    read without importing `headflow.dynamics`). Raises `OSError` or `ValueError` when a file or
    the config cannot be read."""
    kind, base = _model_kind(args)
    return dynamics_module("_kinds").kind_sources(kind, base)


def key(args: argparse.Namespace) -> str | None:
    """The cache key of a run (None when an input cannot be read: the full run reports it)."""
    h = hashlib.sha256()
    h.update(f"{getattr(args.func, '__module__', '')};".encode())
    for name, value in sorted(vars(args).items()):
        if name in _IGNORED:
            continue
        if name == "config" and value is not None:
            try:
                value = Path(value).read_bytes().hex()
            except OSError:
                return None
        h.update(f"{name}={value!r};".encode())
    for name in _PACKAGES:
        try:
            h.update(f"{name}={metadata.version(name)};".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{name}=-;".encode())
    for name in sorted(os.environ):
        if name.startswith(_ENV):
            h.update(f"{name}={os.environ[name]};".encode())
    _sources_digest(h)
    try:
        for path in model_sources(args):
            h.update(str(path).encode())
            h.update(path.read_bytes())
    except (OSError, ValueError, AttributeError):
        return None                       # the full run reports what cannot be read
    return h.hexdigest()[:32]


def _entry(args: argparse.Namespace) -> Path | None:
    k = key(args)
    return None if k is None else cache_root() / "results" / k


def replay(args: argparse.Namespace) -> dict | None:
    """The summary of an earlier identical run, its folder copied to the run's output folder
    (`args.out`, else the earlier run's default folder, relative to the working directory);
    None when there is none or it cannot be used (then the caller runs the command)."""
    if not enabled(args):
        return None
    entry = _entry(args)
    if entry is None or not (entry / SUMMARY).is_file():
        return None
    try:
        summary = json.loads((entry / SUMMARY).read_text())
        out = Path(args.out) if args.out is not None else Path(summary["default_out"])
    except (OSError, ValueError, KeyError):
        return None
    replace = bool(getattr(args, "force", False)) or args.out is None
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not replace)):
        return None                         # the full run gives the error
    try:
        out.absolute().parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.absolute().parent))
    except OSError:
        return None
    try:
        for f in entry.iterdir():
            if f.name != SUMMARY:
                shutil.copy2(f, tmp / f.name)
        meta_path = tmp / "meta.json"
        meta = json.loads(meta_path.read_text())
        meta["replayed"] = {"from": entry.name, "at": datetime.datetime.now(
            datetime.UTC).isoformat(timespec="seconds")}
        meta_path.write_text(json.dumps(meta, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except (OSError, ValueError):
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    return {**summary["summary"], "out": str(out)}


def store(args: argparse.Namespace, out: Path, summary: dict, default_out: Path) -> None:
    """Keep the finished run's folder `out` and `summary` for [`replay`][] (silently nothing
    when the cache is off or cannot be written: a cache is never a reason to fail)."""
    if not enabled(args):
        return
    entry = _entry(args)
    if entry is None:
        return
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    except OSError:
        return
    try:
        for f in Path(out).iterdir():
            if f.is_file():
                shutil.copy2(f, tmp / f.name)
        (tmp / SUMMARY).write_text(json.dumps(
            {"summary": {k: v for k, v in summary.items() if k != "out"},
             "default_out": str(default_out)}))
        if entry.exists():
            shutil.rmtree(entry)
        tmp.rename(entry)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
