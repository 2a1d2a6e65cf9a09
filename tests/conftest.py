"""Test-session setup: float64, strict rank promotion, warnings as errors, compile settings.

- jaxtyping checks every `Float[Array, "..."]` annotation of `dynamics`, `sims` and
  `validation.gpt2` at call time: `pyproject.toml` passes `--jaxtyping-packages` to pytest, whose
  jaxtyping plugin installs the import hook before any test imports them.
- JAX's float64 is switched on here (the library never does it behind the host program's back;
  the `headflow` command line does it at start). Tests use float64 wherever accuracy matters and
  ask for float32 explicitly where the simulator's default is meant.
- `jax_numpy_rank_promotion = "raise"`: an implicit broadcast between arrays of different ranks
  is an error, so shape bugs cannot hide behind broadcasting.
- Warnings raised from our own packages are errors (third-party deprecation noise is not).
- `HEADFLOW_CACHE=0`: the command line's caches between runs are off (see below).
- The modules listed in `_FAST_COMPILE` run with `jax_disable_most_optimizations` (XLA's LLVM
  at -O0): they are dominated by compiling many small programs, not by running them, and this
  cuts their CPU time by about a third. The flag only changes code generation, not the
  semantics of the programs (and it is not part of JAX's compilation cache key, so toggling it
  per module is safe).
"""

from __future__ import annotations

import os

import jax
import pytest

# the command line's caches between runs (JAX's persistent compilation cache and the generated
# symbolic code) stay off in tests, so that no test writes to the user's cache folder or depends
# on what an earlier run left there; tests/test_cache.py turns them on in a folder of its own
os.environ.setdefault("HEADFLOW_CACHE", "0")

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")

from _util import xla_optimizations  # noqa: E402

_FAST_COMPILE = {"test_activations", "test_priors", "test_model", "test_fields", "test_bayes",
                 "test_sgd", "test_config_cli"}


@pytest.fixture(autouse=True, scope="module")
def _fast_compile(request):
    if request.module.__name__.rpartition(".")[2] not in _FAST_COMPILE:
        yield
    else:
        with xla_optimizations(False):
            yield
    # each worker process compiles thousands of programs over the suite; dropping a finished
    # module's compiled programs keeps its memory from growing (a worker once crashed inside
    # XLA's compiler late in a run, with no reproducer)
    jax.clear_caches()


def pytest_configure(config):
    for pkg in ("dynamics", "sims", "validation"):
        # module field: a regex matched against the start of the warning's module name
        config.addinivalue_line("filterwarnings", rf"error::Warning:{pkg}(\.|$)")


def pytest_report_header(config):
    packages = config.getoption("jaxtyping_packages", default=None)
    return f"headflow: jaxtyping runtime shape checks on {packages or 'nothing'}"


# The suite runs on two xdist workers, a test file to a worker (`--dist loadfile`), handed out
# in collection order (`--no-loadscope-reorder` in pyproject.toml: xdist would otherwise order
# the files by their number of tests). The files below take most of the time (measured, longest
# first); sending them out first keeps one worker from finishing a long file alone at the end.
_LONGEST_FIRST = ("test_ode", "test_trajectory", "test_overlap_sgd", "test_cli_robustness",
                  "test_sde", "test_distributed", "test_stability", "test_schedule_cli",
                  "test_fixed_points", "test_sgd", "test_phases", "test_learning_curve",
                  "test_escape", "test_pruning", "test_sde_cli", "test_schedule",
                  "test_ode_drift", "test_activations_cmd", "test_notebooks", "test_compare_sde")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))   # stable: file order kept
