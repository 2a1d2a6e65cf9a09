"""Where the generated symbolic code is kept between processes: set by [`set_source_cache`][]
without importing sympy (a command that never derives anything does not pay for it), read by
`headflow.dynamics.symbolic` when it generates code."""

from __future__ import annotations

from pathlib import Path

_FOLDER: list[Path | None] = [None]


def set_source_cache(folder: str | Path | None) -> None:
    """Keep generated source in `folder` between processes (None: off, the default)."""
    _FOLDER[0] = None if folder is None else Path(folder)


def source_cache() -> Path | None:
    """The folder of [`set_source_cache`][] (None: off)."""
    return _FOLDER[0]
