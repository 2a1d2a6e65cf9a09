"""Configuration validation and the command line (README): every bad input is one line
on stderr, exit status 2 and no result files; good runs write the documented files."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from headflow.dynamics import Config, ConfigError, load_config
from headflow.dynamics.config import parse_value
from headflow.validation.cli import main

# -- configuration -----------------------------------------------------------------------------

BAD_OVERRIDES = [
    # (overrides, the key the message must name)
    (["model.foo=1"], "model.foo"),
    (["modle.L=4"], "modle"),
    (["model.L=0"], "model.L"),
    (["model.H=0"], "model.H"),
    (["model.F=0"], "model.F"),
    (["model.L=2.5"], "model.L"),
    (["model.noise=-0.1"], "model.noise"),
    (["model.rho=0"], "model.rho"),
    (["model.activation=sparsemax2"], "model.activation"),
    (["model.train_values=3"], "model.train_values"),
    (["training.lr=-1"], "training.lr"),
    (["training.lr_bias=-1"], "training.lr_bias"),
    (["training.batch=0"], "training.batch"),
    (["training.t_max=0"], "training.t_max"),
    (["training.lr=nan"], "training.lr"),
    (["prior.kind=laplace"], "prior.kind"),
    (["prior.kind=\"discrete\"", "prior.points=[[1.0], [2.0]]", "prior.weights=[0.5, 0.6]"],
     "prior.weights"),
    (["prior.kind=\"discrete\"", "prior.points=[[1.0], [2.0]]", "prior.weights=[1.5, -0.5]"],
     "prior.weights"),
    (["prior.kind=\"discrete\"", "prior.points=[[1.0, 2.0], [2.0, 0.0]]"], "prior.points"),
    (["prior.kind=\"discrete\"", "prior.points=[[1.0], [2.0, 3.0]]"], "prior.points"),
    (["prior.kind=\"discrete\""], "prior.points"),
    (["prior.kind=\"gaussian\"", "prior.var=[0.0]"], "prior.var"),
    (["prior.kind=\"gaussian\"", "prior.var=[-1.0]"], "prior.var"),
    (["prior.kind=\"gaussian\"", "model.F=2", "prior.mean=[1.0]"], "prior.mean"),
    (["prior.kind=\"one_hot\"", "model.F=2", "prior.weights=[0.2, 0.2, 0.6]"], "prior.weights"),
    (["prior.p=1.5"], "prior.p"),
    (["prior.amplitude=-1"], "prior.amplitude"),
    (["prior.direction=[1.0, 0.0]"], "prior.direction"),
    (["prior.points=[[1.0]]"], "prior.points"),        # not used by flipped_spike
    (["sim.dim=1"], "sim.dim"),
    (["sim.seeds=0"], "sim.seeds"),
    (["sim.dtype=\"float16\""], "sim.dtype"),
    (["output.n_save=1"], "output.n_save"),
    (["output.spacing=cubic"], "output.spacing"),
    (["ode.expectation=exact"], "ode.expectation"),
    (["nosection"], "nosection"),
    (["model=3"], "model"),
]


@pytest.mark.parametrize("overrides,key", BAD_OVERRIDES,
                         ids=[" ".join(o) for o, _ in BAD_OVERRIDES])
def test_config_errors_name_the_key(overrides, key):
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides)
    msg = str(info.value)
    assert key in msg, msg
    assert "\n" not in msg


@pytest.mark.parametrize("body,key", [
    ("[model]\nL = 4\nbogus = 1\n", "model.bogus"),
    ("[nosuch]\nx = 1\n", "nosuch"),
    ("[model]\nH = 0\n", "model.H"),
    ("[prior]\nkind = \"discrete\"\npoints = [[1.0], [2.0]]\nweights = [0.3, 0.3]\n",
     "prior.weights"),
    ("not toml = = 3\n", "invalid TOML"),
])
def test_config_file_errors(tmp_path, body, key):
    path = tmp_path / "c.toml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(path)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml")


def test_defaults_match_interface_spec():
    cfg = load_config()
    assert (cfg.model.L, cfg.model.H, cfg.model.F) == (4, 2, 1)
    assert cfg.model.activation == "bayes_softmax"
    assert (cfg.model.noise, cfg.model.rho, cfg.model.train_values) == (0.0, 1.0, True)
    assert (cfg.prior.kind, cfg.prior.amplitude, cfg.prior.p) == ("flipped_spike", 3.0, 0.7)
    t = cfg.training
    assert (t.lr, t.lr_bias, t.weight_decay, t.batch) == (1.0, 1.0, 0.0, 1)
    assert (t.init_key_std, t.init_value_std, t.init_bias, t.t_max) == (0.1, 0.1, 0.0, 100.0)
    # scrambled Sobol at 16384 nodes: a smaller field error than Monte Carlo at 65536
    # (benchmarks/bench_theory_cost.py); the fastest exact right-hand side where derived
    assert (cfg.ode.expectation, cfg.ode.samples, cfg.ode.sgd_noise) == ("qmc", 16384, True)
    assert cfg.ode.rhs == "auto"
    assert (cfg.ode.solver, cfg.ode.rtol, cfg.ode.atol) == ("tsit5", 1e-6, 1e-8)
    assert (cfg.sim.dim, cfg.sim.seeds) == (1000, 8)
    assert (cfg.output.n_save, cfg.output.spacing) == (200, "linear")


@pytest.mark.parametrize("text,value", [
    ("3", 3), ("1e-3", 1e-3), ("true", True), ("[1, 2]", [1, 2]), ("\"x\"", "x"),
    ("softmax", "softmax"), ("[[1.0], [2.0]]", [[1.0], [2.0]]), ("-2.5", -2.5),
])
def test_parse_set_values(text, value):
    assert parse_value(text) == value


def test_set_overrides_apply():
    cfg = load_config(None, ["model.H=3", "model.activation=softmax1", "training.lr=0.5",
                             "prior.kind=discrete", "prior.points=[[1.0], [-2.0]]",
                             "prior.weights=[0.25, 0.75]", "model.train_values=false"])
    assert cfg.model.H == 3 and cfg.model.activation == "softmax1" and cfg.training.lr == 0.5
    assert cfg.model.train_values is False
    prior = cfg.build_prior()
    np.testing.assert_allclose(prior.points, [[1.0], [-2.0]])
    np.testing.assert_allclose(prior.weights, [0.25, 0.75])
    assert isinstance(cfg.training.lr, float)
    with pytest.raises(ConfigError, match="section.key"):
        load_config(None, ["model.L"])
    with pytest.raises(ConfigError, match="section.key"):
        load_config(None, ["a.b.c=1"])


def test_config_toml_roundtrip(tmp_path):
    cfg = load_config(None, ["prior.kind=gaussian", "model.F=2", "prior.var=[2.0, 0.5]",
                             "model.noise=0.1", "output.spacing=log"])
    path = tmp_path / "c.toml"
    path.write_text(cfg.to_toml())
    again = load_config(path)
    assert again == cfg
    assert again.fingerprint() == cfg.fingerprint()
    assert cfg.replace(**{"model.H": 3}).model.H == 3
    assert isinstance(Config(), Config)


def test_warnings_from_our_packages_are_errors():
    """conftest turns warnings raised from dynamics/sims/validation into errors."""
    with pytest.raises(UserWarning):
        warnings.warn_explicit("x", UserWarning, "f.py", 1, module="headflow.dynamics._model")
    with warnings.catch_warnings(record=True):
        warnings.warn_explicit("x", UserWarning, "f.py", 1, module="dynamicsfoo")


# -- the command line: errors ------------------------------------------------------------------

def _assert_one_error_line(capsys, *needles):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("headflow: error:"), err
    for n in needles:
        assert n in lines[0], (n, err)


def _no_files(root: Path):
    return [p for p in root.rglob("*")] if root.exists() else []


CLI_BAD = [o for o in BAD_OVERRIDES if o[0] != ["nosection"]][::3]


@pytest.mark.parametrize("command", ["sgd", "bayes"])
@pytest.mark.parametrize("overrides,key", CLI_BAD, ids=[" ".join(o) for o, _ in CLI_BAD])
def test_cli_config_error(tmp_path, capsys, command, overrides, key):
    out = tmp_path / "out"
    argv = [command, "--out", str(out), "--json"]
    for o in overrides:
        argv += ["--set", o]
    assert main(argv) == 2
    _assert_one_error_line(capsys, key)
    assert _no_files(tmp_path) == []
    assert capsys.readouterr().out == ""


def test_cli_bad_config_file(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text("[model]\nL = 4\nbogus = 1\n")
    assert main(["sgd", str(path), "--out", str(tmp_path / "o")]) == 2
    _assert_one_error_line(capsys, "model.bogus")
    assert main(["sgd", str(tmp_path / "missing.toml"), "--out", str(tmp_path / "o")]) == 2
    _assert_one_error_line(capsys, "missing.toml")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv", [["sgd", "--dim", "0"], ["sgd", "--seeds", "x"],
                                  ["nosuchcommand"], ["sgd", "--bogus"]])
def test_cli_argument_errors(tmp_path, capsys, argv):
    with pytest.raises(SystemExit) as info:
        main(argv + ["--out", str(tmp_path / "o")])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("headflow"), err
    assert "error:" in err[0]
    assert not (tmp_path / "o").exists()


def _unwritable_outs(tmp_path: Path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    outs = [a_file, a_file / "sub"]
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o500)
    if not os.access(ro, os.W_OK):  # root can write anywhere: skip that case then
        outs.append(ro / "sub")
    if os.access("/proc", os.F_OK):
        outs.append(Path("/proc/headflow-test-out"))
    return outs


@pytest.mark.parametrize("command", ["sgd", "bayes"])
def test_cli_unwritable_out(tmp_path, capsys, command):
    """An `--out` that is a file, lies under a file, in a read-only folder (unless root) or on
    a read-only file system: one error line naming `--out`, before any computation, and no
    files anywhere."""
    outs = _unwritable_outs(tmp_path)
    extra = ["--samples", "64"] if command == "bayes" else ["--set", "sim.seeds=1"]
    try:
        for out in outs:
            before = sorted(str(p) for p in tmp_path.rglob("*"))
            assert main([command, "--out", str(out), "--set", "sim.dim=20", "--set",
                         "training.t_max=0.1", "--set", "output.n_save=2", *extra]) == 2, out
            _assert_one_error_line(capsys, "--out")
            assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    finally:
        os.chmod(tmp_path / "ro", 0o700)


def test_cli_diverging_run(tmp_path, capsys):
    out = tmp_path / "out"
    # the configuration of tests/test_sgd.py::test_divergence_raises (one compilation for both)
    argv = ["sgd", "--out", str(out), "--json", "--set", "training.lr=1e6"]
    for o in ["sim.dim=100", "sim.seeds=2", "training.t_max=2", "output.n_save=9",
              "sim.risk_samples=256"]:
        argv += ["--set", o]
    assert main(argv) == 2
    _assert_one_error_line(capsys, "diverged", "training.lr")
    assert _no_files(tmp_path) == []


# -- the command line: good runs ---------------------------------------------------------------

TINY_TOML = """\
[model]
L = 3
H = 2
activation = "softmax1"

[training]
t_max = 0.5

[sim]
dim = 40
seeds = 2
risk_samples = 256

[output]
n_save = 5
"""


def test_cli_sgd_writes_results(tmp_path, capsys):
    cfg_path = tmp_path / "tiny.toml"
    cfg_path.write_text(TINY_TOML)
    out = tmp_path / "run"
    assert main(["sgd", str(cfg_path), "--out", str(out), "--json"]) == 0
    stdout = capsys.readouterr().out
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert {"risk_final", "risk_final_sem", "dim", "seeds", "out"} <= summary.keys()
    assert summary["dim"] == 40 and summary["seeds"] == 2 and Path(summary["out"]) == out
    S, T, H, F = 2, 5, 2, 1
    with np.load(out / "sgd.npz") as z:
        a = dict(z)
    shapes = {"t": (T,), "risk": (S, T), "risk_err": (S, T), "m": (S, T, H, F),
              "q": (S, T, H, H), "n": (S, T, H), "s": (S, T, H, H), "b": (S, T, H),
              "kv": (S, T, H, H), "kvs": (S, T, H), "vks": (S, T, H, F)}
    for k, shape in shapes.items():
        assert a[k].shape == shape, (k, a[k].shape)
        assert np.all(np.isfinite(a[k])), k
    np.testing.assert_allclose(summary["risk_final"], a["risk"][:, -1].mean(), rtol=1e-12)
    np.testing.assert_allclose(summary["risk_final_sem"],
                               a["risk"][:, -1].std(ddof=1) / np.sqrt(S), rtol=1e-9)
    # config.toml: fully resolved, re-loadable, equal to the configuration that ran
    again = load_config(out / "config.toml")
    assert again == load_config(cfg_path)
    assert again.prior.amplitude == 3.0 and again.prior.p == 0.7   # defaults resolved
    meta = json.loads((out / "meta.json").read_text())
    assert meta["command"] == "sgd"
    assert {"versions", "git_commit", "devices", "wall_s", "dtype", "seeds"} <= meta.keys()
    assert meta["seeds"] == [0, 1] and meta["dtype"] == "float32"
    pngs = list(out.glob("*.png"))
    assert pngs and pngs[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp leftovers


def test_cli_sgd_flags_override(tmp_path, capsys):
    """`--dim`, `--seeds` and `--set` override the file (here back to the shapes of the test
    above, so the compiled step is reused)."""
    cfg_path = tmp_path / "tiny.toml"
    cfg_path.write_text(TINY_TOML.replace("dim = 40", "dim = 30").replace("seeds = 2", "seeds = 1")
                        .replace("n_save = 5", "n_save = 3"))
    out = tmp_path / "run"
    assert main(["sgd", str(cfg_path), "--out", str(out), "--json", "--dim", "40",
                 "--seeds", "2", "--set", "output.n_save=5"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["dim"] == 40 and summary["seeds"] == 2
    with np.load(out / "sgd.npz") as z:
        assert z["risk"].shape == (2, 5)
    cfg = load_config(out / "config.toml")
    assert (cfg.sim.dim, cfg.sim.seeds, cfg.output.n_save) == (40, 2, 5)


@pytest.mark.parametrize("kind", ["flipped_spike", "gaussian"])
def test_cli_bayes_json(tmp_path, capsys, kind):
    out = tmp_path / "b"
    assert main(["bayes", "--out", str(out), "--json", "--samples", "2048",
                 "--set", f"prior.kind={kind}", "--set", "model.L=3"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    keys = {"bayes_risk", "bayes_risk_err", "construction_risk", "construction_risk_err", "out"}
    assert keys <= summary.keys()
    assert 0 < summary["bayes_risk"] < 1 and summary["bayes_risk_err"] > 0
    if kind == "gaussian":
        assert summary["construction_risk"] is None and summary["construction_risk_err"] is None
    else:
        err = np.hypot(summary["bayes_risk_err"], summary["construction_risk_err"])
        assert abs(summary["construction_risk"] - summary["bayes_risk"]) < 5 * err
        assert summary["construction_softmax_risk"] > summary["construction_risk"]
    assert (out / "config.toml").exists() and (out / "meta.json").exists()
    assert json.loads((out / "bayes.json").read_text())["bayes_risk"] == summary["bayes_risk"]
