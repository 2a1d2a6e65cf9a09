"""Test-session setup: runtime shape checking of our packages, float64, warnings as errors.

- jaxtyping's import hook (with beartype) checks every `Float[Array, "..."]` annotation in
  `dynamics` and `sims` at call time. It must be installed before those packages are imported,
  so it runs at the top of this file (pytest imports it before any test module). If something
  imported `dynamics` earlier (another plugin, `python -c "import dynamics; pytest.main()"`), the
  hook cannot act and we carry on without it. `HEADFLOW_TYPECHECK=0` switches it off.
- Importing `dynamics` enables float64 in JAX (`jax_enable_x64`); tests use float64 wherever
  accuracy matters and ask for float32 explicitly where the simulator's default is meant.
- Warnings raised from our own packages are errors (third-party deprecation noise is not).
- The modules listed in `_FAST_COMPILE` run with `jax_disable_most_optimizations` (XLA's LLVM
  at -O0): they are dominated by compiling many small programs, not by running them, and this
  cuts their CPU time by about a third. The flag only changes code generation, not the
  semantics of the programs (and it is not part of JAX's compilation cache key, so toggling it
  per module is safe).
"""

from __future__ import annotations

import os
import sys

import pytest

_OURS = ("dynamics", "sims")
TYPECHECKED = False

if os.environ.get("HEADFLOW_TYPECHECK", "1") != "0" and not any(
        name == pkg or name.startswith(pkg + ".") for name in sys.modules for pkg in _OURS):
    try:
        import jaxtyping
    except ImportError:  # pragma: no cover - jaxtyping is a hard dependency
        pass
    else:
        # PEP 484's numeric tower: an int is a valid `float` (as for static type checkers)
        jaxtyping.install_import_hook(
            list(_OURS), "beartype.beartype(conf=beartype.BeartypeConf(is_pep484_tower=True))")
        TYPECHECKED = True

import dynamics  # noqa: E402,F401  (enables float64)
from _util import xla_optimizations  # noqa: E402

_FAST_COMPILE = {"test_activations", "test_priors", "test_model", "test_fields", "test_bayes",
                 "test_sgd", "test_config_cli"}


@pytest.fixture(autouse=True, scope="module")
def _fast_compile(request):
    if request.module.__name__.rpartition(".")[2] not in _FAST_COMPILE:
        yield
        return
    with xla_optimizations(False):
        yield


def pytest_configure(config):
    for pkg in ("dynamics", "sims", "validation"):
        # module field: a regex matched against the start of the warning's module name
        config.addinivalue_line("filterwarnings", rf"error::Warning:{pkg}(\.|$)")


def pytest_report_header(config):
    return f"headflow: jaxtyping runtime shape checks {'on' if TYPECHECKED else 'off'}"
