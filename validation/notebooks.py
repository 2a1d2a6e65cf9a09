"""The notebooks of `notebooks/` with their stored outputs: executing one at a size, stamping
it with the hash of its code, and telling whether stored outputs are still those of its code.

A notebook's first code cell (tagged `parameters`) sets `SIZE`. [`execute`][] runs a notebook
with that cell set to the size asked for, puts the committed source of the cell back, and
records in the notebook's metadata, under `headflow`, the size, the hash of its code cells
([`code_hash`][]), the commit it ran on and its wall time. The documentation site renders the
stored outputs; [`stale`][] says when the code cells changed after the outputs were made.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import time
from pathlib import Path
from typing import Any

SIZES = ("full", "ci")
"""The sizes every notebook defines: `full`, the size of its claims, and `ci`, a small size."""

PARAMETERS = re.compile(r"^SIZE = ", re.M)
"""How the parameters cell sets the size."""


def code_hash(nb: Any) -> str:
    """The SHA-256 of a notebook's code cells (their sources, in order), the parameters cell as
    committed: what its stored outputs were made from."""
    h = hashlib.sha256()
    for cell in nb.cells:
        if cell.cell_type == "code":
            h.update(cell.source.encode())
            h.update(b"\0")
    return h.hexdigest()


def has_outputs(nb: Any) -> bool:
    """Whether any code cell of the notebook has stored outputs or an execution count."""
    return any(cell.get("outputs") or cell.get("execution_count") is not None
               for cell in nb.cells if cell.cell_type == "code")


def stale(nb: Any) -> str | None:
    """Why a notebook's stored outputs are not those of its code at full size (None: they
    are, or there are none)."""
    if not has_outputs(nb):
        return None
    stamp = nb.metadata.get("headflow")
    if not stamp:
        return "it has outputs but no headflow stamp (run `headflow notebooks`)"
    if stamp.get("size") != "full":
        return f"its outputs are of SIZE = {stamp.get('size')!r}, not 'full'"
    if stamp.get("code_sha256") != code_hash(nb):
        return ("its code cells changed after the outputs were made (run `headflow notebooks "
                "NAME` again, or strip the outputs)")
    return None


def strip(nb: Any) -> Any:
    """The notebook without outputs, execution counts or stamp (in place; returned)."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nb.metadata.pop("headflow", None)
    return nb


def parameters_cell(nb: Any) -> int:
    """The index of the first code cell, which must be tagged `parameters` and set `SIZE`.

    **Raises:** `ValueError` naming what is missing."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            if "parameters" not in cell.metadata.get("tags", []):
                raise ValueError("the first code cell is not tagged `parameters`")
            if not PARAMETERS.search(cell.source):
                raise ValueError("the parameters cell does not set SIZE")
            return i
    raise ValueError("no code cell")


def execute(path: Path, size: str = "full", *, timeout: int = 7200) -> Any:
    """Run the notebook at `path` top to bottom at `SIZE = size` in its folder, and return it
    with its outputs and stamp (the file is not written: [`write`][] does that). The
    parameters cell keeps its committed source and has no outputs."""
    import nbformat
    from nbclient import NotebookClient

    if size not in SIZES:
        raise ValueError(f"size {size!r}: choose one of {', '.join(SIZES)}")
    nb = strip(nbformat.read(path, as_version=4))
    i = parameters_cell(nb)
    committed = nb.cells[i].source
    nb.cells[i].source = f'SIZE = "{size}"'
    start = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(Path(path).parent)}}).execute()
    nb.cells[i].source = committed
    nb.cells[i].outputs = []
    nb.metadata["headflow"] = {"size": size, "code_sha256": code_hash(nb),
                               "commit": _commit(Path(path).parent),
                               "wall_s": round(time.perf_counter() - start, 1)}
    return nb


def write(nb: Any, path: Path) -> None:
    """Write the notebook to `path` through a temporary file beside it, so that an interrupted
    write leaves the old file."""
    import nbformat

    tmp = Path(path).with_name(f".{Path(path).name}.tmp")
    try:
        nbformat.write(nb, tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def _commit(folder: Path) -> str | None:
    """`git describe --always --dirty` of the repository holding `folder` (None outside one)."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=folder,
                             capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None
