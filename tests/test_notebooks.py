"""Every notebook in `notebooks/` runs top to bottom at `SIZE = "ci"` and ends with its verdict.

Conventions (checked here): the first code cell is tagged `parameters` (papermill style) and
sets `SIZE`; the test strips the stored outputs (those of `headflow notebooks` at full size,
which the documentation site shows; `tests/test_docs_site.py` checks that they are still those
of the code), replaces that cell's source with `SIZE = "ci"` (after raising the kernel's
garbage-collector thresholds as `tests/conftest.py` does) and executes the notebook with nbclient
in the `notebooks/` folder; the last line printed by the last cell is
`verdict: <claim>: <reproduced|not reproduced>: <numbers>`.

Every verdict line a notebook prints is checked against `tests/notebook_verdicts.toml`, which
names each claim and the verdict it comes out with at `SIZE = "ci"`: the claims known not to
come out at that size are listed there by name as "not reproduced", and a verdict that changes
either way fails the test.

The kernels share the test session's compilation cache (through JAX's environment variables; a
notebook itself configures nothing): a program a notebook traces again, or one a test compiled
before, is read back instead of compiled (the saving: `benchmarks/RESULTS.md`, "The test
suite"). They compile at the session's XLA optimization level (`XLA_FLAGS`, inherited from
`tests/conftest.py`), and the notebooks of `COMPILE_BOUND`, which at `SIZE = "ci"` compile
more than they run, with `JAX_DISABLE_MOST_OPTIMIZATIONS` (XLA's LLVM at -O0, as the test
modules of `_FAST_COMPILE` in `tests/conftest.py`); both change code generation only.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from headflow.validation._cache import cache_root, jax_cache_options
from headflow.validation.notebooks import parameters_cell, strip

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
VERDICT = re.compile(r"^verdict: [^:]+: (reproduced|not reproduced): .+$")
CLAIM = re.compile(r"^verdict: (.+?): (reproduced|not reproduced): ", re.M)
EXPECTED = tomllib.loads((Path(__file__).with_name("notebook_verdicts.toml")).read_text())

COMPILE_BOUND = frozenset({"activations_and_bayes", "committee_machine", "escape_times",
                           "gpt2_bounds", "phases_and_stages", "pruning", "schedules"})
"""The notebooks whose kernels run at XLA's -O0: each took less time at -O0 than at the
session's level 1; the others took as long or longer (`information_exponent`, whose SDE
ensembles run long, twice as long; `benchmarks/RESULTS.md`, "The test suite")."""


def _printed(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream")


def test_there_are_notebooks():
    assert NOTEBOOKS
    assert sorted(EXPECTED) == sorted(p.stem for p in NOTEBOOKS)   # one table per notebook
    assert COMPILE_BOUND <= {p.stem for p in NOTEBOOKS}


@pytest.fixture
def _kernel_env(monkeypatch, request):
    if os.environ.get("HEADFLOW_CACHE", "1") != "0":
        for option, value in jax_cache_options(cache_root()).items():
            monkeypatch.setenv(option.upper(), str(value))
    # the kernels inherit the session's XLA optimization level 1 through XLA_FLAGS
    # (tests/conftest.py); the compile-bound ones go down to level 0
    if request.node.callspec.params["path"].stem in COMPILE_BOUND:
        monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
    else:
        monkeypatch.delenv("JAX_DISABLE_MOST_OPTIMIZATIONS", raising=False)


@pytest.mark.slow
@pytest.mark.usefixtures("_kernel_env")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_states_its_verdict(path):
    nb = strip(nbformat.read(path, as_version=4))
    i = parameters_cell(nb)
    # the kernel's garbage collector at the test session's thresholds (tests/conftest.py)
    nb.cells[i].source = ('from headflow.validation._entry import relax_gc\nrelax_gc()\n'
                          'SIZE = "ci"')
    NotebookClient(nb, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    last = _printed(nb.cells[-1]).strip().splitlines()
    assert last, "the last cell prints nothing"
    print(last[-1])
    assert VERDICT.match(last[-1]), last[-1]
    said = {m.group(1): m.group(2)
            for cell in nb.cells if cell.cell_type == "code"
            for m in CLAIM.finditer(_printed(cell))}
    assert said == EXPECTED[path.stem], {
        claim: (said.get(claim), EXPECTED[path.stem].get(claim))
        for claim in set(said) | set(EXPECTED[path.stem])
        if said.get(claim) != EXPECTED[path.stem].get(claim)}
