"""Where quasi-Monte Carlo node sets are kept between processes: set by [`set_node_cache`][],
read and written by [`headflow.dynamics.expectations.QuasiMonteCarlo`][], so that a run whose
nodes are stored neither draws them again nor imports `scipy.stats` to do so."""

from __future__ import annotations

from pathlib import Path

_FOLDER: list[Path | None] = [None]


def set_node_cache(folder: str | Path | None) -> None:
    """Keep quasi-Monte Carlo node sets in `folder` between processes (None: off, the
    default)."""
    _FOLDER[0] = None if folder is None else Path(folder)


def node_cache() -> Path | None:
    """The folder of [`set_node_cache`][] (None: off)."""
    return _FOLDER[0]
