"""Figures from experiment results (no computation here beyond what a figure needs).

matplotlib is imported on first use (through [`pyplot`][]), so commands that do not draw, and
`--help`, start faster.
"""

from __future__ import annotations

from typing import Any


class _Pyplot:
    """`matplotlib.pyplot` with the non-interactive Agg backend, imported on first use."""

    _module: Any = None

    def __getattr__(self, name: str) -> Any:
        if _Pyplot._module is None:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot

            _Pyplot._module = matplotlib.pyplot
        return getattr(_Pyplot._module, name)


pyplot = _Pyplot()
