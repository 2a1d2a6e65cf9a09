"""Run folders: atomic result directories with `config.toml` and `meta.json`.

A run writes into a hidden temporary folder next to its destination and moves the files into
place only when it succeeds, so a failed or interrupted run never leaves partial result files.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from dynamics import HeadflowError

_PACKAGES = ("headflow", "jax", "jaxlib", "diffrax", "equinox", "numpy", "scipy", "sympy",
             "matplotlib", "safetensors", "tokenizers")


def default_out(command: str, fingerprint: str) -> Path:
    """`runs/<command>-<hash of the fully resolved config>`."""
    digest = hashlib.sha256(fingerprint.encode()).hexdigest()[:10]
    return Path("runs") / f"{command}-{digest}"


def check_writable(out: Path) -> None:
    """Fail early (before any computation) when `out` cannot be created or written."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise HeadflowError(f"--out {out}: exists and is not a directory")
    parent = out if out.exists() else _existing_parent(out)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise HeadflowError(f"--out {out}: directory {parent} is not writable")


def _existing_parent(path: Path) -> Path:
    path = path.absolute()
    while not path.exists():
        path = path.parent
    if not path.is_dir():
        raise HeadflowError(f"--out: {path} is not a directory")
    return path


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

    versions = {}
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
        "x64_enabled": bool(jax.config.jax_enable_x64),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


class RunDir:
    """A result folder under construction; see [`run_dir`][]."""

    def __init__(self, tmp: Path, out: Path):
        self.tmp = tmp
        self.out = out
        self.meta: dict[str, Any] = {}
        self.wall: dict[str, float] = {}
        self._t0 = time.perf_counter()

    def path(self, name: str) -> Path:
        """Where to write the file `name` (inside the temporary folder)."""
        return self.tmp / name

    @contextlib.contextmanager
    def timed(self, label: str) -> Iterator[None]:
        """Record the wall time of a block under `meta.json["wall_s"][label]`."""
        t = time.perf_counter()
        try:
            yield
        finally:
            self.wall[label] = self.wall.get(label, 0.0) + time.perf_counter() - t


@contextlib.contextmanager
def run_dir(out: Path, *, command: str, config_toml: str | None = None,
            meta: dict[str, Any] | None = None) -> Iterator[RunDir]:
    """Create the result folder `out` atomically.

    **Arguments:**

    - `out`: destination folder (created; existing files of the same names are replaced).
    - `command`: the headflow command, recorded in `meta.json`.
    - `config_toml`: the fully resolved configuration, written as `config.toml`.
    - `meta`: extra entries for `meta.json` (seeds, dtype, ...).

    **Returns:** a [`RunDir`][]; write files to `run.path(name)`. On success the files are moved
    into `out` together with `config.toml` and `meta.json`; on any exception nothing is left.
    """
    out = Path(out)
    check_writable(out)
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=parent))
    except OSError as err:
        raise HeadflowError(f"--out {out}: cannot create ({err.strerror})") from None
    run = RunDir(tmp, out)
    try:
        yield run
        if config_toml is not None:
            run.path("config.toml").write_text(config_toml)
        info = {"command": command, **environment_meta(), **(meta or {}), **run.meta}
        run.wall["total"] = time.perf_counter() - run._t0
        info["wall_s"] = {k: round(v, 4) for k, v in run.wall.items()}
        run.path("meta.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
        out.mkdir(parents=True, exist_ok=True)
        for item in tmp.iterdir():
            target = out / item.name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            os.replace(item, target)
    except OSError as err:
        raise HeadflowError(f"--out {out}: cannot write results ({err.strerror})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
