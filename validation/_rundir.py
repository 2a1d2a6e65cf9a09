"""Run folders: atomic result directories with `config.toml` and `meta.json`.

A run writes into a hidden temporary folder next to its destination and renames it into place
only when it succeeds, so a failed or interrupted run never leaves partial result files, nor
the empty parent folders it created.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from headflow.dynamics import HeadflowError, check_stop
from headflow.dynamics.distributed import is_main_process, process_zero_says

from . import _phases
from ._json import dumps

_PACKAGES = ("headflow", "jax", "jaxlib", "diffrax", "equinox", "numpy", "scipy", "sympy",
             "matplotlib", "safetensors", "tokenizers")


def default_out(command: str, fingerprint: str) -> Path:
    """`runs/<command>-<hash of the fully resolved config>`."""
    digest = hashlib.sha256(fingerprint.encode()).hexdigest()[:10]
    return Path("runs") / f"{command}-{digest}"


def check_writable(out: Path) -> None:
    """Fail early (before any computation) when the folder `out` cannot be created or
    written."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise HeadflowError(f"--out {out}: exists and is not a directory")
    probe_writable(out if out.exists() else existing_parent(out), f"--out {out}")


def check_writable_file(out: Path, what: str = "a file") -> None:
    """Fail early when the file `out` cannot be created in its (possibly missing) folder."""
    out = Path(out)
    if out.is_dir():
        raise HeadflowError(f"--out {out}: is a folder; this command writes {what}")
    probe_writable(existing_parent(out.absolute().parent), f"--out {out}")


def existing_parent(path: Path) -> Path:
    """The deepest existing ancestor of `path` (or `path` itself); it must be a folder."""
    path = path.absolute()
    while not path.exists():
        path = path.parent
    if not path.is_dir():
        raise HeadflowError(f"--out: {path} is not a directory")
    return path


def probe_writable(folder: Path, what: str) -> None:
    """Create and remove a file in `folder`: the only test that also holds on read-only file
    systems and for users whom permissions do not stop (root)."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".headflow-probe-", dir=folder)
        os.close(fd)
        os.unlink(tmp)
    except OSError as err:
        raise HeadflowError(f"{what}: cannot write in {folder} ({err.strerror})") from None


def git_commit() -> str | None:
    """The git commit of the headflow sources, when they live in a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def environment_meta() -> dict[str, Any]:
    """Package versions, git commit, devices and platform, for `meta.json`."""
    import jax

    versions: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "versions": versions,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_commit": git_commit(),
        "devices": [str(d) for d in jax.devices()],
        "processes": jax.process_count(),
        "x64_enabled": bool(jax.config.read("jax_enable_x64")),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


class RunDir:
    """A result folder under construction; see [`run_dir`][]."""

    def __init__(self, tmp: Path, out: Path):
        self.tmp = tmp
        self.out = out
        self.meta: dict[str, Any] = {}
        self.wall: dict[str, float] = {}
        _phases.listen()
        _phases.lap("setup")
        self._t0 = time.perf_counter()
        # from the entry point, the whole command's JAX phases; from Python, the folder's
        self._jax0 = (_phases.jax_seconds() if _phases.since_start() is None
                      else dict.fromkeys(_phases.jax_seconds(), 0.0))

    def path(self, name: str) -> Path:
        """Where to write the file `name` (inside the temporary folder)."""
        return self.tmp / name

    def save_npz(self, name: str, arrays: Mapping[str, Any]) -> None:
        """Write `arrays` as the `.npz` file `name` in the run folder."""
        np.savez(self.path(name), **arrays)  # type: ignore[arg-type]

    def phases(self) -> dict[str, float]:
        """The phases before the folder (`imports`, `setup`), the JAX phases and the `total` so
        far (see [`headflow.validation._phases`][])."""
        out = _phases.laps()
        out.update({k: v - self._jax0[k] for k, v in _phases.jax_seconds().items()})
        since = _phases.since_start()
        out["total"] = time.perf_counter() - self._t0 if since is None else since
        return out

    @contextlib.contextmanager
    def timed(self, label: str) -> Iterator[None]:
        """Record the wall time of a block under `meta.json["wall_s"][label]` (the phases are
        listed in [`headflow.validation._phases`][])."""
        t = time.perf_counter()
        try:
            yield
        finally:
            self.wall[label] = self.wall.get(label, 0.0) + time.perf_counter() - t


_ACTIVE: dict[Path, list[Path]] = {}
"""Temporary folders of runs in progress, each with the parent folders its run created (both
removed by [`discard_active`][] on a forced exit)."""


def discard_active() -> None:
    """Remove the temporary folders of every run in progress, and the parent folders those
    runs created (a forced exit after an interrupt cannot unwind the runs' own clean-up).

    The run may still be writing on its own thread (a figure, say) or removing the same
    folder: a folder that a file reappeared in is removed again, for up to a second."""
    for tmp, created in list(_ACTIVE.items()):
        for _ in range(100):
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                tmp.unlink(missing_ok=True)
            if not tmp.exists():
                break
            time.sleep(0.01)
        _remove_empty(created)
        _ACTIVE.pop(tmp, None)


def _make_parents(path: Path) -> list[Path]:
    """Create the missing ancestors of `path`; return those created, deepest last."""
    missing = []
    p = path.absolute().parent
    while not p.exists():
        missing.append(p)
        p = p.parent
    for m in reversed(missing):
        m.mkdir()
    return list(reversed(missing))


def _remove_empty(dirs: list[Path]) -> None:
    for d in reversed(dirs):                 # deepest first
        try:
            d.rmdir()
        except OSError:
            break


@contextlib.contextmanager
def run_dir(out: Path, *, command: str, config_toml: str | None = None,
            meta: dict[str, Any] | None = None, replace: bool = False) -> Iterator[RunDir]:
    """Create the result folder `out` atomically.

    The run writes into a hidden temporary sibling of `out`, which is renamed to `out` only
    when the block succeeds. On any exception (an error, an interrupt) the temporary folder and
    every parent folder this run created are removed: nothing is left behind.

    **Arguments:**

    - `out`: destination folder. If it exists and is not empty it is refused, unless
      `replace`, in which case it is replaced as a whole on success.
    - `command`: the headflow command, recorded in `meta.json`.
    - `config_toml`: the fully resolved configuration, written as `config.toml`.
    - `meta`: extra entries for `meta.json` (seeds, dtype, ...).
    - `replace`: replace an existing non-empty `out` (the `--force` flag).

    Under [`headflow.dynamics.distributed`][] only process 0 checks and writes `out` (every process
    raises when it refuses it); the others write into a private temporary folder that is always
    removed.

    **Returns:** a [`RunDir`][]; write files to `run.path(name)`.

    **Raises:** [`HeadflowError`][] (one line) when `out` cannot be used or written.
    """
    out = Path(out)
    if str(out) in ("", "."):
        raise HeadflowError("--out: an output folder is needed (not the working folder)")
    main = is_main_process()
    refused: HeadflowError | None = None
    if main:                     # the folder of the process that writes it
        try:
            check_writable(out)
            if out.is_dir() and any(out.iterdir()) and not replace:
                raise HeadflowError(f"--out {out}: exists and is not empty; pass --force to "
                                    "replace it")
        except HeadflowError as err:
            refused = err
    if not process_zero_says(refused is None):
        raise refused or HeadflowError(f"--out {out}: refused by process 0 (see its error)")
    try:
        created = _make_parents(out) if main else []
    except OSError as err:
        raise HeadflowError(f"--out {out}: cannot create ({err.strerror})") from None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-",
                                    dir=out.absolute().parent if main else None))
    except OSError as err:
        _remove_empty(created)
        raise HeadflowError(f"--out {out}: cannot create ({err.strerror})") from None
    _ACTIVE[tmp] = created
    run = RunDir(tmp, out)
    done = False
    try:
        yield run
        check_stop()           # a run that finished after a stop request is not reported
        if not main:
            return
        if config_toml is not None:
            run.path("config.toml").write_text(config_toml)
        info = {"command": command, **environment_meta(), **(meta or {}), **run.meta}
        run.wall.update(run.phases())
        info["wall_s"] = {k: round(v, 4) for k, v in run.wall.items()}
        run.path("meta.json").write_text(dumps(info, indent=2) + "\n")
        _move_into_place(tmp, out)
        done = True
    except OSError as err:
        raise HeadflowError(f"--out {out}: cannot write results ({err.strerror})") from None
    finally:
        # registered until the clean-up is over: a forced exit that comes in the middle of it
        # (`discard_active`, on the main thread) still knows what to remove
        shutil.rmtree(tmp, ignore_errors=True)
        if not done:
            _remove_empty(created)
        _ACTIVE.pop(tmp, None)


@contextlib.contextmanager
def atomic_file(out: Path) -> Iterator[Path]:
    """Write one result file atomically: the block writes to the yielded temporary path beside
    `out`, which is renamed to `out` only when the block succeeds. On any exception (or a forced
    exit after an interrupt) the temporary file and the parent folders created for it are
    removed. Under [`headflow.dynamics.distributed`][] only process 0 writes `out`; the others write
    into a private temporary file that is removed.

    **Raises:** [`HeadflowError`][] (one line) when `out` cannot be written."""
    out = Path(out)
    main = is_main_process()
    try:
        created = _make_parents(out) if main else []
    except OSError as err:
        raise HeadflowError(f"--out {out}: cannot create ({err.strerror})") from None
    done = False
    tmp: Path | None = None
    try:
        fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp",
                                    dir=out.absolute().parent if main else None)
        os.close(fd)
        tmp = Path(name)
        _ACTIVE[tmp] = created
        yield tmp
        check_stop()
        if main:
            os.replace(tmp, out)
        done = True
    except OSError as err:
        raise HeadflowError(f"--out {out}: cannot write ({err.strerror})") from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        if not done:
            _remove_empty(created)
        if tmp is not None:
            _ACTIVE.pop(tmp, None)        # after the clean-up, as in `run_dir`


def _move_into_place(tmp: Path, out: Path) -> None:
    """Rename `tmp` to `out`; an existing `out` is first moved aside, then deleted."""
    if not out.exists():
        os.replace(tmp, out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.absolute().parent))
    os.replace(out, old / "previous")
    try:
        os.replace(tmp, out)
    except OSError:
        os.replace(old / "previous", out)          # put the previous results back
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)
