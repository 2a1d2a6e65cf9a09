"""Nothing lost, nothing half-written: interrupts, atomic run folders, strict JSON, early
validation and a fuzzed command line.

- every defect of the command-line audit has a regression test below;
- SIGINT/SIGTERM in a subprocess end the run with 130/143, no crash and no output folder;
- a hypothesis-driven fuzzer feeds every command mixtures of valid keys, wrong types, out-of-range
  and non-finite values and random flags (in-process, at tiny sizes) and checks that each call
  exits 0 or 2 with no traceback, prints strict JSON, and leaves nothing behind on failure.
"""

from __future__ import annotations

import math
import signal
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _util import ROOT, assert_stopped_cleanly, start_headflow
from _util import strict_json as _strict
from _util import xla_optimizations
from headflow.validation.cli import main

TINY = ["--set", "sim.dim=50", "--set", "sim.seeds=2", "--set", "training.t_max=1",
        "--set", "output.n_save=5", "--set", "ode.samples=1024"]


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*"))


def _one_line_error(capsys, *needles):
    err = capsys.readouterr().err.strip()
    assert err.startswith("headflow") and "error:" in err, err
    assert len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, err
    return err


# -- atomic run folders -----------------------------------------------------------------------

def test_failed_run_leaves_no_parents(tmp_path, capsys):
    out = tmp_path / "a" / "b" / "c" / "res"
    assert main(["sgd", *TINY, "--set", "training.lr=1e6", "--out", str(out)]) == 2
    _one_line_error(capsys, "diverged")
    assert _files(tmp_path) == []


def test_empty_out_is_an_error(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(["sgd", *TINY, "--out", ""])
    assert info.value.code == 2
    _one_line_error(capsys, "--out")
    assert _files(tmp_path) == []


def test_existing_out_needs_force_and_is_replaced_whole(tmp_path, capsys):
    out = tmp_path / "res"
    out.mkdir()
    (out / "sgd.npz").write_text("old results of another run")
    (out / "stale.txt").write_text("x")
    assert main(["sgd", *TINY, "--out", str(out)]) == 2
    _one_line_error(capsys, "--force")
    assert (out / "stale.txt").read_text() == "x"          # untouched
    assert main(["sgd", *TINY, "--set", "model.H=3", "--out", str(out), "--force"]) == 0
    assert not (out / "stale.txt").exists()                  # replaced as a whole
    assert "H = 3" in (out / "config.toml").read_text()
    import numpy as np
    assert np.load(out / "sgd.npz")["m"].shape[2] == 3      # the new run's arrays
    assert [p.name for p in tmp_path.iterdir()] == ["res"]  # no temporary folders left


# -- misleading or late errors ----------------------------------------------------------------

def test_grid_over_prior_kinds(tmp_path, capsys):
    out = tmp_path / "sw"
    assert main(["sweep", *TINY, "--grid", "prior.kind=flipped_spike,one_hot",
                 "--out", str(out), "--json"]) == 0
    summary = _strict(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["points"] == 2


def test_grid_changing_heads_fails_before_computing(tmp_path, capsys):
    t0 = time.perf_counter()
    assert main(["sweep", *TINY, "--grid", "model.H=1,2", "--out", str(tmp_path / "sw")]) == 2
    assert time.perf_counter() - t0 < 5.0
    _one_line_error(capsys, "model.H")
    assert _files(tmp_path) == []


@pytest.mark.parametrize("grid", ["training.lr=,", "training.lr= , ,", "training.lr="])
def test_grid_without_values(tmp_path, capsys, grid):
    """An empty value list is one line, exit 2, no files (it was an IndexError)."""
    assert main(["sweep", *TINY, "--grid", grid, "--out", str(tmp_path / "sw")]) == 2
    _one_line_error(capsys, "--grid")
    assert _files(tmp_path) == []


def test_max_steps_has_its_own_phase_label(tmp_path, capsys):
    out = tmp_path / "sw"
    assert main(["sweep", *TINY, "--grid", "training.lr=0.5,1", "--max-steps", "1",
                 "--out", str(out), "--json"]) == 0
    summary = _strict(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["status"] == ["max_steps", "max_steps"]
    assert summary["phase"] == ["max steps", "max steps"]


def test_negative_dims_name_the_problem(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["escape", *TINY, "--dims", "-50,100", "--out", str(tmp_path / "e")])
    assert info.value.code == 2
    _one_line_error(capsys, "--dims", "at least two distinct dimensions")


@pytest.mark.parametrize("argv", [["bayes", "--samples", "1"],
                                  ["bayes", "--samples", "63"],
                                  ["activations", "--risk-samples", "2"],
                                  ["prune", "--risk-samples", "8"]])
def test_too_few_samples_are_refused(tmp_path, capsys, argv):
    with pytest.raises(SystemExit) as info:
        main([*argv, "--out", str(tmp_path / "x")])
    assert info.value.code == 2
    _one_line_error(capsys, "samples")
    assert _files(tmp_path) == []


@pytest.mark.parametrize("key", ["ode.samples=1099511627776", "sim.risk_samples=8",
                                 "sim.dim=100000000000"])
def test_resource_limits_are_checked_first(tmp_path, capsys, key):
    assert main(["ode", *TINY, "--set", key, "--out", str(tmp_path / "o")]) == 2
    _one_line_error(capsys, key.partition("=")[0])
    assert _files(tmp_path) == []


def test_escape_never_agrees_without_a_prediction(tmp_path, capsys):
    """A model with one student has no linear-stability prediction (no unit differences to
    grow): the report fits the measured slope and says why there is no verdict, instead of one.
    The `k = 1` student escapes at `t ≈ 1` at every D, so every run is in the fit."""
    out = tmp_path / "e"
    assert main(["escape", "--set", 'model.kind="single_index"', "--set",
                 'model.activation="he1"', "--set", 'model.loss="correlation"', "--set",
                 "model.spherical=true", "--set", "training.lr=0.2", "--set",
                 "training.t_max=4", "--set", "output.n_save=41", "--set", "sim.seeds=4",
                 "--set", 'sim.space="overlaps"', "--dims", "40,80", "--no-sde",
                 "--out", str(out), "--json"]) == 0
    rep = _strict(capsys.readouterr().out.strip().splitlines()[-1])
    assert rep["lambda"] is None and rep["slope_predicted"] is None
    assert rep["agrees"] is None
    assert "at least two interchangeable units" in rep["agrees_reason"]
    assert rep["censored"] == [0, 0] and abs(rep["slope_measured"]) < 1.0


def test_prune_refuses_diverged_sgd_weights(tmp_path, capsys):
    """SGD weights that blew up (the overlaps past the blow-up level, where the simulator
    stops) have no pruning curve: one line naming the activation and the seed, exit 2, nothing
    left."""
    out = tmp_path / "p"
    code = main(["prune", "--set", "model.H=2", "--set", "model.L=2", "--set", "training.lr=5",
                 "--set", "training.lr_bias=5", "--set", "training.t_max=5", "--source", "sgd",
                 "--dim", "100", "--seeds", "2", "--set", 'sim.space="overlaps"',
                 "--activations", "softmax", "--random-orders", "0", "--risk-samples", "1024",
                 "--out", str(out)])
    assert code == 2
    _one_line_error(capsys, "softmax: SGD in overlap space diverged (seed ")
    assert _files(tmp_path) == []


# -- strict JSON ------------------------------------------------------------------------------

def test_prune_json_is_strict(tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["prune", "--set", "model.L=3", "--set", "model.H=2", "--set",
                 "ode.samples=256", "--t-max", "20", "--t-first", "10", "--risk-samples",
                 "1024", "--random-orders", "1", "--activations", "softmax", "--out", str(out),
                 "--json"]) == 0
    _strict(capsys.readouterr().out.strip().splitlines()[-1])
    for f in out.glob("*.json"):
        _strict(f.read_text())


# -- help -------------------------------------------------------------------------------------

def test_help_texts(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "The `headflow` command line" not in text and "Order-parameter theory" in text
    assert "models of your own" in text and "models" in text.split("COMMAND", 1)[1]
    for command in ["sgd", "ode", "compare", "bayes", "phases", "escape", "scaling",
                    "activations", "prune", "sweep", "demo"]:
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "README (section Configuration)" in text and "Example: headflow " + command in text
        assert "%%" not in text, command          # descriptions are not %-formatted
    readme = (ROOT / "README.md").read_text()
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "under three minutes" in " ".join(capsys.readouterr().out.split())
    assert "under three minutes" in " ".join(readme.split())


# -- interrupts -------------------------------------------------------------------------------

INTERRUPTED = {
    "sgd": ["sgd", "--set", "sim.dim=3000", "--set", "sim.seeds=4", "--set",
            "training.t_max=200"],
    "ode": ["ode", "--set", "training.t_max=2000", "--set", "ode.samples=65536"],
    "compare": ["compare", "--set", "sim.dim=2000", "--set", "training.t_max=200"],
}


SIGNALS = [(signal.SIGINT, 130, 4.0), (signal.SIGINT, 130, 12.0), (signal.SIGTERM, 143, 9.0)]
"""(signal, expected exit status, seconds after the start at which it is sent)."""


@pytest.mark.slow
def test_interrupt_stops_cleanly(tmp_path):
    """Every command of `INTERRUPTED`, sent each of `SIGNALS`: exit status 128 + signal, one
    line `headflow: interrupted`, no traceback, nothing left of the nested output folder.

    The nine runs go at once: each mostly waits for its signal, so one after the other they
    would hold a test worker for two minutes. Under that load the delays fall in start-up,
    compilation and computation alike, which is what the different delays are for."""
    cases = [(command, sig, code, after) for command in INTERRUPTED
             for sig, code, after in SIGNALS]
    t0 = time.monotonic()
    procs = []
    for i, (command, *_) in enumerate(cases):
        (tmp_path / f"case{i}").mkdir()
        procs.append(start_headflow(INTERRUPTED[command],
                                    tmp_path / f"case{i}" / "nested" / "res"))
    for i in sorted(range(len(cases)), key=lambda i: cases[i][3]):
        time.sleep(max(0.0, t0 + cases[i][3] - time.monotonic()))
        procs[i].send_signal(cases[i][1])
    for i, (command, sig, code, after) in enumerate(cases):
        assert_stopped_cleanly(procs[i], code, tmp_path / f"case{i}" / "nested",
                               f"{command} after {after} s, signal {sig}")


# -- the fuzzer -------------------------------------------------------------------------------

COMMANDS = ["sgd", "ode", "compare", "bayes", "phases", "escape", "scaling", "activations",
            "prune", "sweep", "sde"]
KEYS = ["model.L", "model.H", "model.F", "model.activation", "model.noise", "model.rho",
        "model.train_values", "prior.kind", "prior.amplitude", "prior.p", "prior.points",
        "prior.weights", "prior.mean", "prior.var", "prior.direction", "training.lr",
        "training.lr_bias", "training.weight_decay", "training.batch", "training.t_max",
        "training.init_key_std", "ode.expectation", "ode.samples", "ode.solver", "ode.rtol",
        "ode.form", "ode.rhs", "ode.init", "sim.dim", "sim.seeds", "sim.dtype",
        "sim.risk_samples", "output.n_save", "output.spacing", "output.t_min", "model.bogus",
        "nosection.key", "training"]
VALUES = st.one_of(
    st.sampled_from(["0", "-1", "1", "2", "1e300", "-1e-300", "nan", "inf", "-inf", "true",
                     "\"softmax\"", "\"bayes_softmax\"", "\"gaussian\"", "\"discrete\"",
                     "[1.0]", "[[1.0], [-1.0]]", "[0.5, 0.5]", "[]", "\"\"", "x", "3.5",
                     "\"qmc\"", "\"full\"", "\"symbolic\"", "[1, \"a\"]", "{a = 1}"]),
    st.integers(-5, 10).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr))
FLAGS = st.sampled_from([[], ["--dim", "0"], ["--dim", "-3"], ["--seeds", "x"],
                         ["--samples", "10"], ["--dims", "5"], ["--dims", "a,b"],
                         ["--grid", "training.lr=1,2"], ["--grid", "bogus"],
                         ["--grid", "model.L=2,3"], ["--amplitudes", "nan"],
                         ["--t-max", "-1"], ["--threshold", "0"], ["--max-steps", "0"],
                         ["--criterion", "worst"], ["--random-orders", "-1"],
                         ["--activations", "softmax,nope"], ["--unknown"], ["--json"],
                         ["--heads", "0"], ["--etas", "-1"]])
# a cheap, valid base (the fuzz then spoils some of it); expensive options are kept small
BASE = ["--set", "sim.dim=24", "--set", "sim.seeds=1", "--set", "training.t_max=0.05",
        "--set", "output.n_save=2", "--set", "ode.samples=64", "--set", "model.L=2",
        "--set", "sim.risk_samples=64", "--set", "ode.max_steps=200", "--set", "sde.dt=0.025",
        "--set", "sde.samples_drift=64", "--set", "sde.samples_noise=64"]
CHEAP = {"bayes": ["--samples", "64"], "activations": ["--t-max", "0.1", "--risk-samples",
                                                       "64", "--bayes-samples", "64"],
         "prune": ["--t-max", "0.1", "--risk-samples", "64", "--random-orders", "0"],
         "escape": ["--dims", "24,30", "--paths", "2", "--extrapolate", ""],
         "scaling": ["--dims", "24,30,36", "--set", "sim.seeds=2"],
         "sweep": ["--grid", "training.lr=0.5"], "compare": ["--paths", "2"],
         "sde": ["--paths", "2"]}


@st.composite
def argvs(draw):
    command = draw(st.sampled_from(COMMANDS))
    sets = draw(st.lists(st.tuples(st.sampled_from(KEYS), VALUES), min_size=1, max_size=3))
    argv = [command, *BASE, *CHEAP.get(command, [])]
    for key, value in sets:
        argv += ["--set", f"{key}={value}"]
    argv += draw(FLAGS)
    # about one case in eight computes for real (tiny sizes); the others stop after every
    # input has been validated (`--check`), which is where bad inputs must be caught
    if draw(st.integers(0, 7)):
        argv.append("--check")
    return argv


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(argv=argvs())
def test_fuzzed_command_line(tmp_path_factory, capsys, argv):
    root = tmp_path_factory.mktemp("fuzz")
    out = root / "deep" / "out"
    try:
        with xla_optimizations(False):   # tiny programs: compiling dominates, so compile fast
            code = main([*argv, "--out", str(out), "--json"])
    except SystemExit as ex:          # argparse: --help or a bad argument
        code = ex.code
    captured = capsys.readouterr()
    assert code in (0, 2), (argv, code, captured.err[-2000:])
    assert "Traceback" not in captured.err, (argv, captured.err[-2000:])
    if code == 2:
        assert len(captured.err.strip().splitlines()) == 1, (argv, captured.err)
        assert not (root / "deep").exists(), (argv, _files(root))
    else:
        summary = _strict(captured.out.strip().splitlines()[-1])
        assert summary["out"] == str(out)
        assert summary.get("checked") or out.is_dir()
        for f in out.glob("*.json"):
            _strict(f.read_text())
        for value in _numbers(summary):
            assert value is None or math.isfinite(value)


def _numbers(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _numbers(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _numbers(v)
    elif isinstance(obj, float):
        yield obj


# -- headflow notebooks ---------------------------------------------------------------------

def _notebook(path: Path, body: str) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('SIZE = "full"  # or "ci"',
                                          metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, path)


def test_notebooks_command_stores_stamped_outputs_and_leaves_failures(tmp_path, capsys):
    """`headflow notebooks` runs a notebook at the size asked for, stores its outputs with a
    stamp that `stale` accepts and the parameters cell as committed; a notebook whose cell
    fails is left byte for byte as it was (one line, exit 2), and an unknown name is refused
    before anything runs."""
    import nbformat

    from headflow.validation.notebooks import stale

    _notebook(tmp_path / "good.ipynb", 'print(f"verdict: size: reproduced: {SIZE}")')
    _notebook(tmp_path / "bad.ipynb", 'raise ValueError("no such luck")')
    before = (tmp_path / "bad.ipynb").read_bytes()
    assert main(["notebooks", "nope", "--dir", str(tmp_path)]) == 2
    _one_line_error(capsys, "no notebook 'nope'")
    assert main(["notebooks", "bad", "--dir", str(tmp_path)]) == 2
    _one_line_error(capsys, "bad: a cell failed (ValueError: no such luck)")
    assert (tmp_path / "bad.ipynb").read_bytes() == before
    assert main(["notebooks", "good", "--dir", str(tmp_path)]) == 0
    assert "verdict: size: reproduced: full" in capsys.readouterr().out
    nb = nbformat.read(tmp_path / "good.ipynb", as_version=4)
    assert stale(nb) is None and nb.metadata["headflow"]["size"] == "full"
    assert nb.cells[0].source == 'SIZE = "full"  # or "ci"' and not nb.cells[0].outputs
    assert "reproduced: full" in nb.cells[1].outputs[0]["text"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.ipynb", "good.ipynb"]
