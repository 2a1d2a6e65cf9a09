"""Strict JSON for every `--json` line and every JSON file headflow writes.

JSON has no NaN or infinity. Python's `json` writes them as the bare words `NaN` and `Infinity`
by default, which most parsers reject. Here every non-finite float becomes `null`, and the dump
runs with `allow_nan=False`, so anything that slips past the conversion fails loudly (in tests)
instead of writing an invalid file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np


def to_jsonable(obj: Any) -> Any:
    """`obj` with numpy scalars and arrays turned into Python numbers and lists, paths into
    strings, tuples into lists, and every non-finite float into `None`."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    if hasattr(obj, "__fspath__"):
        return str(obj)
    if hasattr(obj, "__array__"):          # jax arrays
        return to_jsonable(np.asarray(obj))
    if isinstance(obj, complex):
        return to_jsonable([obj.real, obj.imag])
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def dumps(obj: Any, *, indent: int | None = None) -> str:
    """Strict JSON text of `obj` (see the module docstring)."""
    return json.dumps(to_jsonable(obj), indent=indent, allow_nan=False)


def write(path: str | Path, obj: Any) -> None:
    """Write `obj` as indented strict JSON (with a final newline) to `path`."""
    Path(path).write_text(dumps(obj, indent=2) + "\n")
