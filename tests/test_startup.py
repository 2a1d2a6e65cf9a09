"""Start-up: `headflow --help`, `headflow COMMAND --help` and an argument that argparse rejects
import nothing heavy (no JAX, sympy, scipy, matplotlib, torch, ..., not even numpy).

Each check runs in a fresh interpreter (this test process has imported JAX already). The wall
time of `headflow --help` is printed, not asserted: speed is measured by
`benchmarks/bench_startup.py`, not by timed tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headflow.validation.commands._light import (BUILTIN_ACTIVATIONS, CRITERIA, ESCAPE_THRESHOLD,
                                        EXTRAPOLATE, MIN_SAMPLES, MODELS, PRUNABLE_TOLERANCE,
                                                 STATIONARY_Z, THEORIES, known_activations)

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

HEAVY = ("jax", "jaxlib", "sympy", "scipy", "matplotlib", "torch", "equinox", "diffrax",
         "optimistix", "numpy", "dynamics", "sims", "headflow.validation.gpt2")
"""Modules (with their submodules) that building the parser must not import: `dynamics` and
`sims` import JAX in their `__init__`; `headflow.validation.gpt2` is the GPT-2 package (the `gpt2`
command's parser lives in `headflow.validation.commands.gpt2`)."""

ALLOWED = ("headflow.dynamics._constants",)
"""Light submodules of the packages above, loaded without their package's `__init__`."""

GPT2_COMMANDS = ("random-checkpoint", "extract", "bounds", "train")

# Builds the parser, asks for every help and a few arguments that argparse rejects, and reports
# (as JSON on the last line) each call's exit status and the heavy modules imported.
_PROBE = r"""
import contextlib, io, json, sys
from headflow.validation.cli import build_parser, main

heavy, allowed = %(heavy)r, %(allowed)r
parser = build_parser()
commands = list(parser._subparsers._group_actions[0].choices)
calls = [["--help"], [], ["--bogus"]] + [[c, "--help"] for c in commands]
calls += [["gpt2", c, "--help"] for c in %(gpt2)r]
calls += [["ode", "--bogus"], ["escape", "--dims", "1"], ["compare", "--theory", "x"],
          ["activations", "--activations", "nope"], ["bayes", "--samples", "3"],
          ["schedule", "--lr-range", "2,1"], ["gpt2", "bounds", "--length", "0"]]
codes, outputs = {}, {}
for argv in calls:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = "returned"
        except SystemExit as stop:
            code = stop.code
    codes[" ".join(argv)] = code
    outputs[" ".join(argv)] = (out.getvalue(), err.getvalue())
loaded = sorted(m for m in sys.modules if m not in allowed
                and any(m == h or m.startswith(h + ".") for h in heavy))
print(json.dumps({"commands": commands, "codes": codes, "outputs": outputs, "loaded": loaded,
                  "modules": sorted(sys.modules)}))
"""


def _probe() -> dict:
    code = _PROBE % {"heavy": HEAVY, "allowed": ALLOWED, "gpt2": GPT2_COMMANDS}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_help_and_bad_arguments_import_nothing_heavy():
    res = _probe()
    assert len(res["commands"]) >= 15 and "gpt2" in res["commands"]
    codes = res["codes"]
    for argv, code in codes.items():
        helps = argv == "--help" or argv.endswith(" --help")
        assert code == (0 if helps else 2), (argv, code, res["outputs"][argv])
    for argv, (out, err) in res["outputs"].items():
        if argv == "--help" or argv.endswith(" --help"):
            assert out.startswith("usage: headflow") and not err, argv
        else:                             # one line `headflow ...: error: ...`
            lines = err.strip().splitlines()
            assert lines[-1].startswith("headflow") and ": error: " in lines[-1], (argv, err)
    assert res["loaded"] == [], f"--help imported {res['loaded']}"
    ours = [m for m in res["modules"] if m.split(".")[0] == "headflow"]
    print("modules of ours imported by --help:", ", ".join(ours))


def test_help_wall_time_is_reported():
    """Times `headflow --help` and `headflow ode --help` (printed; asserted only to succeed)."""
    for argv in (["--help"], ["ode", "--help"]):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "headflow.validation", *argv], cwd=ROOT,
                              env=ENV,
                              capture_output=True, text=True, timeout=120)
        wall = time.perf_counter() - t0
        assert proc.returncode == 0 and proc.stdout.startswith("usage: headflow"), proc.stderr
        print(f"headflow {' '.join(argv)}: {wall:.3f} s")


# Runs the console script's `entry()` on `--help` (which exits through argparse) and prints the
# garbage collector's thresholds the process ended with.
_GC_PROBE = r"""
import gc, sys
from headflow.validation._entry import entry
sys.argv = ["headflow", "--help"]
try:
    entry()
except SystemExit:
    pass
print(list(gc.get_threshold()))
"""


def test_the_command_line_runs_at_raised_gc_thresholds():
    """The console script sets `GC_THRESHOLDS` before anything else: every gen-0 threshold
    above Python's default, in a fresh interpreter that starts at the default."""
    from headflow.validation._entry import GC_THRESHOLDS

    proc = subprocess.run([sys.executable, "-c", _GC_PROBE], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == list(GC_THRESHOLDS)
    assert GC_THRESHOLDS[0] > 700


_FREEZE_PROBE = r"""
import gc, sys
from headflow.validation._entry import entry
sys.argv = ["headflow", "ode", "--set", "no_such_section.x=1"]
try:
    entry()
except SystemExit as stop:
    print(stop.code, gc.get_freeze_count() > 0)
"""


def test_the_command_line_freezes_its_objects_before_the_teardown():
    """A command that returned (here with a bad input, exit 2) leaves the interpreter with its
    objects frozen (`gc.freeze`), so the teardown's collections do not walk them."""
    proc = subprocess.run([sys.executable, "-c", _FREEZE_PROBE], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["2", "True"], proc.stdout + proc.stderr


def test_light_constants_are_the_heavy_modules_ones():
    """The values `--help` shows are the very objects the heavy modules use (one definition)."""
    from headflow.dynamics.analysis import STATIONARY_Z as z
    from headflow.dynamics.expectations import MIN_SAMPLES as min_samples
    from headflow.dynamics.measures import ESCAPE_THRESHOLD as threshold
    from headflow.validation.experiments.compare import THEORIES as theories
    from headflow.validation.experiments.escape import EXTRAPOLATE as extrapolate
    from headflow.validation.experiments.fit import MODELS as models
    from headflow.validation.experiments.pruning import CRITERIA as criteria
    from headflow.validation.experiments.pruning import PRUNABLE_TOLERANCE as tolerance

    assert (threshold, min_samples, z) == (ESCAPE_THRESHOLD, MIN_SAMPLES, STATIONARY_Z)
    assert theories is THEORIES and extrapolate is EXTRAPOLATE and models is MODELS
    assert criteria is CRITERIA and tolerance is PRUNABLE_TOLERANCE
    import headflow.dynamics._constants as constants

    assert sys.modules["headflow.dynamics._constants"] is constants


def test_builtin_activations_are_the_registry():
    """`--activations` defaults and `--help` name the built-in activations without importing
    `dynamics`: they must be exactly what `dynamics` registers on import (in a fresh process,
    since tests may register temporary ones)."""
    code = ("from headflow.dynamics.activations import activation_names; import json; "
            "print(json.dumps(activation_names()))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert tuple(json.loads(proc.stdout.strip().splitlines()[-1])) == BUILTIN_ACTIVATIONS
    from headflow.dynamics.activations import activation_names

    assert known_activations() == activation_names()   # once imported: the registry itself


_NO_SYMPY = r"""
import json, sys
from headflow.validation.cli import main
main(["ode", "validation/configs/committee.toml", "--set", "training.t_max=2",
      "--set", "output.n_save=3", "--out", sys.argv[1]])
print(json.dumps(sorted(m for m in sys.modules if m == "sympy" or m.startswith("sympy."))))
"""


@pytest.mark.slow                 # a whole run: not in the quick tier
def test_a_run_that_derives_nothing_imports_no_sympy(tmp_path):
    """`headflow ode` of the committee (closed-form unit integrals, no generated code) never
    imports sympy: the symbolic machinery loads on demand, and the caches (on, in a fresh
    folder) are set up without it."""
    env = {**ENV, "HEADFLOW_CACHE": "1", "HEADFLOW_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", _NO_SYMPY, str(tmp_path / "out")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
    assert (tmp_path / "out" / "ode.npz").is_file()
