"""The code is lint-clean (ruff) and type-clean (mypy), with the settings of `pyproject.toml`.

Run as tests so that the README's test command, and `.ci/run` which calls it, check them too.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["dynamics", "sims", "validation"]


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    found = str(exe) if exe.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (it is in the `test` extra)")
    return found


def test_ruff():
    proc = subprocess.run([_tool("ruff"), "check", *PACKAGES, "src", "examples", "tests",
                           "benchmarks"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


@pytest.mark.slow
def test_mypy():
    proc = subprocess.run([_tool("mypy"), *PACKAGES], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
