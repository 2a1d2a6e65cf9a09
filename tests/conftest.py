"""Test-session setup: float64, strict rank promotion, warnings as errors, compile settings.

- jaxtyping checks every `Float[Array, "..."]` annotation of `dynamics`, `sims` and
  `headflow.validation.gpt2` at call time: `pyproject.toml` passes `--jaxtyping-packages` to
  pytest, whose jaxtyping plugin installs the import hook before any test imports them.
- JAX's float64 is switched on here (the library never does it behind the host program's back;
  the `headflow` command line does it at start). Tests use float64 wherever accuracy matters and
  ask for float32 explicitly where the simulator's default is meant.
- `jax_numpy_rank_promotion = "raise"`: an implicit broadcast between arrays of different ranks
  is an error, so shape bugs cannot hide behind broadcasting.
- The garbage collector runs at the command line's raised thresholds (below).
- Warnings raised from our own packages are errors (third-party deprecation noise is not).
- Caches between runs (JAX's persistent compilation cache and the generated symbolic code) live
  in one fresh folder per test session, shared by the xdist workers and by the command lines the
  tests start as subprocesses, and removed at the end (see below).
- Every program compiles at XLA's optimization level 1 and without XLA's CPU fusion emitters
  (`XLA_FLAGS`, below), which compiles the suite's programs a third faster. The modules
  listed in `_FAST_COMPILE`, and the tests marked `fast_compile`, run with
  `jax_disable_most_optimizations` (XLA's LLVM at -O0): they are dominated by compiling many
  small programs, not by running them, and this cuts their CPU time by a few percent to a third
  (a module that runs large programs, such as `test_ode_drift`, gets slower and is left out). The
  flag only changes code generation, not the semantics of the programs. It is part of JAX's
  persistent cache key (XLA's debug options), so programs compiled with and without it are
  separate entries of the session's cache; JAX's in-memory caches do not key on it, so the
  programs in memory are dropped whenever it changes (`tests/_util.py`,
  `set_xla_optimizations`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

# XLA's CPU fusion emitters off (`_NO_FUSION_EMITTERS`, below) if this jaxlib knows the flag: the
# child process that asks starts here, so that it runs while this process imports JAX and
# headflow, and is waited for below
_NO_FUSION_EMITTERS = "--xla_cpu_use_fusion_emitters=false"
_FUSION_PROBE = (None if "--xla_cpu_use_fusion_emitters" in os.environ.get("XLA_FLAGS", "") else
                 subprocess.Popen([sys.executable, "-c", "import jax; jax.devices()"],
                                  env={**os.environ, "XLA_FLAGS": (
                                      f"{os.environ.get('XLA_FLAGS', '')} "
                                      f"{_NO_FUSION_EMITTERS}").strip()},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")

from _util import set_xla_optimizations, xla_optimizations  # noqa: E402

from headflow.validation._cache import configure as configure_cache  # noqa: E402
from headflow.validation._entry import relax_gc  # noqa: E402

# The garbage collector's thresholds of the command line (`headflow.validation._entry`), in the
# controller, in each xdist worker and in the notebooks' kernels (tests/test_notebooks.py): the
# suite traces and compiles program after program, and at Python's defaults the collector walks
# the workers' whole heap (torch, sympy, the cached programs) over and over
relax_gc()

# The command line's caches between runs (JAX's persistent compilation cache and the generated
# symbolic code) point at a folder made for this session by the controlling process (inherited
# through the environment by the xdist workers and by subprocesses), so no test writes to the
# user's cache folder or depends on an earlier session. Within the session a program compiled by
# one worker, by a subprocess, or before a module's `jax.clear_caches()` is read back instead of
# compiled again; the cache changes no result (`tests/test_cache.py`, which uses folders of its
# own). `HEADFLOW_CACHE=0` before pytest keeps them off.
_SESSION_CACHE = "HEADFLOW_TEST_SESSION_CACHE"


def _start_session_cache() -> None:
    if os.environ.get("HEADFLOW_CACHE", "1").strip().lower() in ("0", "off", "false", "no"):
        os.environ["HEADFLOW_CACHE"] = "0"
        return
    if _SESSION_CACHE not in os.environ:        # the controller (or a run without xdist)
        os.environ[_SESSION_CACHE] = tempfile.mkdtemp(prefix="headflow-test-cache-")
    os.environ["HEADFLOW_CACHE"] = "1"
    os.environ["HEADFLOW_CACHE_DIR"] = os.environ[_SESSION_CACHE]


_start_session_cache()
configure_cache()

# XLA's CPU backend at optimization level 1 (of 3; the default is 2) for every program of the
# session, the xdist workers', the command lines' the tests start as subprocesses and the
# notebooks' kernels (all inherit the environment; XLA reads the flags when the backend starts,
# after this). Level 1 compiles faster than 2 and runs faster than 0: the modules that mix
# compiling and running take 5-10% less CPU time than at 2, the notebooks 20% less than at 0,
# and a compile-bound module the same as at 0 (`benchmarks/RESULTS.md`, "The test suite"). The
# modules and tests below that compile far more than they run stay at 0. A level already set in
# `XLA_FLAGS` is kept.
if "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_backend_optimization_level=1").strip()

# XLA's CPU backend without its MLIR fusion emitters (`--xla_cpu_use_fusion_emitters=false`:
# fusions go through the older LLVM IR emitter): the same programs compile in about a third less
# time; some element-wise programs run slower, but the suite as a whole takes a quarter less
# CPU time (`benchmarks/RESULTS.md`, "The test suite"). XLA aborts on a flag it does not know,
# so the controller first asks a child process whether this jaxlib accepts it (`_FUSION_PROBE`,
# started at the top of this file); the workers, the command lines and the notebook kernels
# inherit the result through `XLA_FLAGS`.
if _FUSION_PROBE is not None and _FUSION_PROBE.wait(timeout=120) == 0:
    os.environ["XLA_FLAGS"] = f"{os.environ['XLA_FLAGS']} {_NO_FUSION_EMITTERS}"

_FAST_COMPILE = {"test_activations", "test_priors", "test_model", "test_fields", "test_bayes",
                 "test_sgd", "test_config_cli", "test_schedule_cli", "test_sde_cli", "test_ode",
                 "test_learning_curve", "test_scaling", "test_phases",
                 "test_pruning", "test_activations_cmd", "test_fixed_points", "test_convergence",
                 "test_cli_robustness", "test_stability", "test_sde", "test_committee_curve",
                 "test_symbolic", "test_numpy_reference", "test_theory_vs_sgd",
                 "test_committee_exact", "test_symbolic_readout"}


@pytest.fixture(autouse=True, scope="module")
def _fast_compile(request):
    # the module's setting (`set_xla_optimizations`: switching it drops the programs in memory);
    # a module marked `fast_compile` as a whole is set once, not again around each test
    set_xla_optimizations(request.module.__name__.rpartition(".")[2] not in _FAST_COMPILE
                          and request.node.get_closest_marker("fast_compile") is None)
    yield
    # each worker process compiles thousands of programs over the suite; dropping a finished
    # module's programs keeps its memory from growing (a worker once crashed inside XLA's
    # compiler late in a run, with no reproducer). Keeping them for the next modules saves a
    # little on a few modules run alone, and showed no gain in full runs (`benchmarks/RESULTS.md`,
    # "The test suite")
    jax.clear_caches()


@pytest.fixture(autouse=True)
def _fast_compile_test(request):
    """`@pytest.mark.fast_compile`: one compile-bound test in a module that is not."""
    if request.node.get_closest_marker("fast_compile") is None:
        yield
    else:
        with xla_optimizations(False):
            yield


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput") and _SESSION_CACHE in os.environ:
        shutil.rmtree(os.environ.pop(_SESSION_CACHE), ignore_errors=True)


def pytest_configure(config):
    for pkg in ("headflow.dynamics", "headflow.sims", "headflow.validation"):
        # module field: a regex matched against the start of the warning's module name
        config.addinivalue_line("filterwarnings", rf"error::Warning:{re.escape(pkg)}(\.|$)")


def pytest_report_header(config):
    packages = config.getoption("jaxtyping_packages", default=None)
    return f"headflow: jaxtyping runtime shape checks on {packages or 'nothing'}"


# The suite runs on two xdist workers, a test file to a worker (`--dist loadfile`), handed out
# in collection order (`--no-loadscope-reorder` in pyproject.toml: xdist would otherwise order
# the files by their number of tests). The files below take most of the time, listed longest
# first by their time in a full run (`benchmarks/RESULTS.md`, "The test suite"): handing out the
# longest files first (the notebooks, a third of one worker's time, first of all) keeps one
# worker from finishing a long file alone at the end. The quick tier's files keep the same
# order among themselves.
_LONGEST_FIRST = ("test_notebooks", "test_schedule_cli", "test_learning_curve", "test_ode",
                  "test_cli_robustness", "test_sde", "test_stability", "test_activations_cmd",
                  "test_ode_drift", "test_cache", "test_distributed", "test_escape",
                  "test_user_models", "test_fixed_points", "test_overlap_sgd",
                  "test_trajectory", "test_committee_curve", "test_committee_escape",
                  "test_phases", "test_symbolic", "test_index_models", "test_convergence",
                  "test_schedule",
                  "test_pruning", "test_committee_commands", "test_committee_sgd",
                  "test_extension", "test_committee_cli", "test_bayes", "test_model",
                  "test_fields", "test_gpt2_experiments", "test_sgd", "test_compare_sde",
                  "test_theory_vs_sgd", "test_symmetric_nodes", "test_committee_exact",
                  "test_symbolic_readout", "test_model_extension", "test_gpt2_cli",
                  "test_sde_cli", "test_gpt2_bounds", "test_reference_sgd", "test_imports",
                  "test_committee_overparam", "test_generic_engine", "test_gpt2_model",
                  "test_scaling", "test_priors", "test_activations", "test_sparse_grid")


# The quick tier (`pytest -m quick`, README): the mathematical core, the config and command-line
# contracts and lint, in a few minutes on two cores. Every test of the files below that is not
# marked `slow` is marked `quick` here, and `-m quick` does not even collect the other files
# (their imports alone cost each worker seconds). The full suite (`.ci/run`) runs everything.
QUICK_FILES = ("test_fields", "test_model", "test_priors", "test_activations", "test_moments",
               "test_symbolic", "test_symbolic_readout", "test_generic_engine",
               "test_model_extension", "test_extension", "test_config_cli", "test_cli_options",
               "test_startup", "test_lint", "test_docs_site", "test_docs_defaults", "test_verdicts",
               "test_sparse_grid", "test_numpy_reference", "test_committee_exact",
               "test_theory_vs_sgd", "test_jit")


# Parametrizations of those files that the quick tier leaves out: each took over 5 s in a full
# run on two cores (or over 2 s in the quick tier itself), and the quick tier keeps a cheaper
# case of the same test; and the fuzzing of every command's options with generated values
# (the quick tier keeps the options' contracts). The full suite runs them all.
QUICK_LEAVES_OUT = frozenset({
    "test_cli_options.py::test_bad_option_values",
    "test_symbolic_readout.py::test_derived_rhs_equals_exact_field[3-2-linear-0.2-True]",
    "test_config_cli.py::test_cli_bayes_json[flipped_spike]",
    "test_sparse_grid.py::test_config_and_budget",
    "test_fields.py::test_gram_matrix_definition[discrete_2d]",
    "test_fields.py::test_gram_matrix_definition[flipped_spike]",
    "test_fields.py::test_population_risk_equals_finite_d_risk[gaussian_2d]",
    "test_fields.py::test_population_risk_manifold_paths_agree[softmax]",
    "test_fields.py::test_zero_predictor_risk[gaussian_2d-softmax-0.0-1.0]",
    "test_fields.py::test_zero_predictor_risk[gaussian_2d-softmax1-0.5-1.0]",
    "test_model.py::test_conditional_error_monte_carlo[0.0-True-softmax]",
    "test_model.py::test_conditional_error_through_field_law[flipped_spike-softmax]",
    "test_model.py::test_sgd_step_is_gradient_step[True-softmax]",
    "test_model.py::test_weight_gradients_through_fields[1-softmax]",
    "test_model.py::test_weight_gradients_through_fields[3-softmax]",
    "test_model.py::test_weight_gradients_through_fields[3-softmax1]",
    "test_model_extension.py::test_drift_equals_monte_carlo_of_hand_increments[quadrature]",
    "test_symbolic.py::test_generated_rhs_equals_autodiff[1-1-softmax]",
    "test_symbolic.py::test_generated_rhs_equals_autodiff[1-2-softmax]",
    "test_symbolic.py::test_generated_rhs_equals_autodiff[1-3-softmax]",
    "test_symbolic.py::test_generated_rhs_equals_autodiff[2-1-softmax]",
    "test_symbolic.py::test_generated_rhs_equals_autodiff[1-2-softmax1]",
    "test_symbolic.py::test_generated_rhs_equals_autodiff[1-3-softmax1]",
    "test_symbolic.py::test_generated_rhs_equals_autodiff[2-1-softmax1]",
    "test_symbolic.py::test_generated_rhs_equals_autodiff[2-2-softmax]",
    "test_symbolic.py::test_generated_rhs_equals_autodiff[1-2-bayes_softmax]",
    "test_symbolic.py::test_generated_rhs_equals_autodiff[1-3-bayes_softmax]",
    "test_symbolic.py::test_generated_rhs_equals_autodiff[2-1-bayes_softmax]",
    "test_symbolic.py::test_generated_rhs_variants[bayes_softmax]",
    "test_symbolic.py::test_gradient_flow_form_within_error_bars[softmax]",
    "test_symbolic.py::test_two_code_generators_agree[bayes_softmax-sizes0]",
    "test_symbolic_readout.py::test_derived_rhs_equals_exact_field[1-1-erf-0.0-True]",
    "test_symbolic_readout.py::test_derived_rhs_equals_exact_field[2-1-erf-0.3-False]",
    "test_symbolic_readout.py::test_derived_rhs_equals_exact_field[2-3-erf-0.5-True]",
    "test_symbolic_readout.py::test_derived_rhs_equals_exact_field[4-4-erf-0.1-True]",
    "test_symbolic_readout.py::test_derived_rhs_equals_the_saad_solla_loops[2-1-erf-0.4-True]",
    "test_symbolic_readout.py::test_derived_rhs_equals_the_saad_solla_loops[3-2-erf-0.0-False]",
})


# Tests marked `slow` here rather than in their files: each took 9 s or more in a full run, or
# in a `-m "not slow"` run once the others were left out (`benchmarks/RESULTS.md`, "The test
# suite"), so `-m "not slow"` leaves them to the full suite and stays within its ten minutes.
# The full suite (`.ci/run`) runs them all.
SLOW_BY_TIME = frozenset({
    "test_compare_sde.py::test_demo_summary_states_verdicts",
    "test_compare_sde.py::test_compare_ode_keeps_its_report",
    "test_cli_robustness.py::test_max_steps_has_its_own_phase_label",
    "test_ode.py::test_gradient_flow_decreases_the_risk_monotonically",
    "test_ode.py::test_symmetric_start_never_specializes",
    "test_overlap_sgd.py::test_config_space_dispatch_is_the_chain",
    "test_committee_curve.py::test_sde_curve_gradient_equals_finite_differences",
    "test_user_models.py::test_bad_kinds_are_one_line_errors",
    "test_activations_cmd.py::test_activations_small_config_softmax1_reaches_stationarity",
    "test_activations_cmd.py::test_activations_gradient_flow_unless_asked",
    "test_cache.py::test_repeated_ode_is_replayed_without_jax",
    "test_cli_robustness.py::test_fuzzed_command_line",
    "test_committee_commands.py::test_escape_runs_the_committee",
    "test_committee_curve.py::test_fit_sde_recovers_the_hyperparameters",
    "test_ode.py::test_symmetric_and_psd_along_a_trajectory",
    "test_cli_robustness.py::test_prune_json_is_strict",
    "test_imports.py::test_commands_run_beside_packages_named_like_the_folders",
    "test_fixed_points.py::test_slow_manifold_switch_reaches_a_stationary_state",
    "test_committee_commands.py::test_scaling_runs_the_committee",
    "test_stability.py::test_linear_spread_is_homogeneous_and_initial_law_scales",
    "test_compare_sde.py::test_compare_ensembles[ode-per-seed-None-ode_per_seed.npz]",
    "test_cli_robustness.py::test_grid_over_prior_kinds",
    "test_committee_sgd.py::test_batch_and_weight_decay_follow_the_ode",
    "test_sde.py::test_same_seed_same_paths_other_seed_other_paths",
    "test_stability.py::test_schur_block_structure_of_the_jacobian",
    "test_scaling.py::test_scaling_command_small",
    "test_pruning.py::test_prune_command_from_ode_states",
    "test_compare_sde.py::test_compare_ensembles[sde-4-sde.npz]",
    "test_user_models.py::test_editing_the_model_file_changes_the_next_result",
    "test_learning_curve.py::test_the_curve_is_run_ode",
    "test_convergence.py::test_auto_sizing_on_quadrature_nodes_uses_the_node_change",
    "test_activations_cmd.py::test_activations_reports_the_drift_of_a_non_stationary_state",
    "test_schedule.py::test_sde_follows_the_schedule",
    "test_sparse_grid.py::test_config_and_budget",
    "test_committee_curve.py::test_fit_recovers_the_hyperparameters",
    "test_stability.py::test_jacobian_matches_finite_differences[softmax]",
    "test_fixed_points.py::test_integration_reaches_a_stationary_state[softmax-1-3.0-False]",
    "test_committee_curve.py::test_gradient_equals_finite_differences",
    "test_sde_cli.py::test_sde_writes_results",
    "test_user_models.py::test_fuzzed_model_files",
    "test_reference_sgd.py::test_reference_sgd_equals_headflow_in_law",
    "test_sde.py::test_frozen_values_gaussian_prior",
    "test_fixed_points.py::test_bayes_construction_is_a_gradient_flow_fixed_point[discrete_S3]",
    "test_schedule.py::test_flat_schedule_reproduces_the_constant_step_bit_for_bit",
    "test_committee_curve.py::test_sde_curve_equals_run_sde",
    "test_user_models.py::test_entry_point_and_colliding_package_names",
    "test_overlap_sgd.py::test_equivalence_in_law[frozen_decay_batch2]",
    "test_ode.py::test_configs_differing_in_values_share_one_compiled_program",
    "test_overlap_sgd.py::test_equivalence_in_law[demo]",
    "test_schedule.py::test_ode_follows_the_schedule",
    "test_sde_cli.py::test_sde_non_finite_paths_are_an_error",
    "test_stability.py::test_jacobian_matches_finite_differences[bayes_softmax]",
    "test_fixed_points.py::test_bayes_construction_is_a_gradient_flow_fixed_point[flipped_spike]",
    "test_ode.py::test_divergence_error",
    "test_committee_commands.py::test_phases_runs_the_committee",
    "test_committee_cli.py::test_committee_runs[ode-relu]",
    "test_committee_cli.py::test_committee_runs[sde]",
    "test_escape_observable.py::test_sde_one_student_reports_escapes",
})


def pytest_ignore_collect(collection_path, config):
    """Under `-m quick`, the test files outside `QUICK_FILES` are not collected."""
    if (config.getoption("markexpr", "").strip() == "quick" and collection_path.suffix == ".py"
            and collection_path.name.startswith("test_")
            and collection_path.stem not in QUICK_FILES):
        return True
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.partition("/")[2] in SLOW_BY_TIME:
            item.add_marker(pytest.mark.slow)
        if (item.path.stem in QUICK_FILES and item.get_closest_marker("slow") is None
                and item.nodeid.partition("/")[2] not in QUICK_LEAVES_OUT):
            item.add_marker(pytest.mark.quick)
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))   # stable: file order kept


# `HEADFLOW_TEST_PROFILE=FILE pytest ...`: each worker appends, per test file, the seconds JAX
# spent tracing, lowering and compiling (jax.monitoring's duration events) and the file's wall
# time, one JSON line a file, so that the suite's time can be split into compile work and the
# rest (`benchmarks/RESULTS.md`, "The test suite").
_PROFILE = os.environ.get("HEADFLOW_TEST_PROFILE")

if _PROFILE:
    from headflow.validation import _phases   # the command line's account of JAX's phases

    import logging

    _phases.listen()
    # JAX's own log lines name each program it traces, lowers, compiles or reads back from the
    # cache (at DEBUG level unless `jax_log_compiles`): per program, the count and the seconds
    _PROGRAM_EVENT = re.compile(r"^(?:Finished (tracing|jaxpr to MLIR module conversion|XLA "
                                r"compilation of) (\S+?)(?: for jit)? in ([0-9.]+) sec"
                                r"|Persistent compilation cache (hit) for '([^']+)')")
    _programs: dict[tuple[str, str], list[float]] = {}

    class _ProgramLog(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            m = _PROGRAM_EVENT.match(record.getMessage())
            if m is None:
                return
            if m.group(4):
                name, phase, secs = m.group(5), "hit", 0.0
            else:
                name, secs = m.group(2), float(m.group(3))
                phase = {"tracing": "trace", "XLA compilation of": "compile"}.get(
                    m.group(1), "lower")
            row = _programs.setdefault((name, phase), [0, 0.0])
            row[0] += 1
            row[1] += secs

    for _name in ("jax._src.dispatch", "jax._src.compiler"):
        _logger = logging.getLogger(_name)
        _logger.setLevel(logging.DEBUG)
        _logger.addHandler(_ProgramLog())
        _logger.propagate = False

    @pytest.fixture(autouse=True, scope="module")
    def _profile_module(request):
        before = _phases.jax_seconds()
        _programs.clear()
        start = time.perf_counter()
        yield
        spent = {k: v - before[k] for k, v in _phases.jax_seconds().items()
                 if k in ("trace", "lower", "compile") and v > before[k]}
        row = {"file": request.module.__name__, "wall": time.perf_counter() - start, **spent,
               "programs": [[name, phase, n, round(s, 4)]
                            for (name, phase), (n, s) in sorted(_programs.items())]}
        with open(_PROFILE, "a") as f:
            f.write(json.dumps(row) + "\n")
