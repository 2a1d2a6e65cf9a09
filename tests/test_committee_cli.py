"""The committee machine on the command line (docs/committee.md): `headflow ode|sgd|sde` run a
committee config and write the documented files; the commands written for the attention model
that do not apply to it (activations, prune, bayes) refuse it in one line (exit 2, nothing
written); bad committee configs name their key.

Everything runs in-process (`headflow.validation.cli.main`) at tiny sizes, with XLA at -O0 (the runs
are compile-bound) and the session's shared compilation cache (tests/conftest.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from _util import one_line_error as _one_line_error
from _util import strict_json as _strict
from headflow.dynamics import load_config
from headflow.validation.cli import main

pytestmark = pytest.mark.fast_compile

COMMITTEE = """\
[model]
kind = "committee"
K = 2
M = 2
activation = "erf"

[training]
lr = 0.5
t_max = 5.0

[sim]
dim = 200
seeds = 3

[output]
n_save = 6

[sde]
paths = 3
dt = 0.5
"""
T_SAVE = 6


def _config(tmp_path: Path, text: str = COMMITTEE) -> Path:
    path = tmp_path / "committee.toml"
    path.write_text(text)
    return path


def _nothing_but(root: Path, *keep: str) -> list[str]:
    """Everything under `root` apart from the files `keep` (the config written by the test)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name not in keep)


# -- closed forms of the risk, written here independently of dynamics.units ---------------------

def _gram(Q, R, T):
    """`[[Q, R], [Rᵀ, T]]` over the last two axes."""
    top = np.concatenate([Q, R], axis=-1)
    bottom = np.concatenate([np.swapaxes(R, -1, -2), T], axis=-1)
    return np.concatenate([top, bottom], axis=-2)


def _i2_erf(C):
    """`E[g(λ_a) g(λ_b)]` for `g(x) = erf(x/√2)`: `(2/π) arcsin(C01/√((1+C00)(1+C11)))`."""
    d = np.diagonal(C, axis1=-2, axis2=-1)
    return (2 / np.pi) * np.arcsin(C / np.sqrt((1 + d[..., :, None]) * (1 + d[..., None, :])))


def _i2_relu(C):
    """`E[relu(λ_a) relu(λ_b)]` (the arc-cosine kernel of degree 1, Cho & Saul 2009):
    `√(C00 C11) (sin θ + (π − θ) cos θ) / (2π)`, `cos θ = C01/√(C00 C11)`."""
    d = np.diagonal(C, axis1=-2, axis2=-1)
    s = np.sqrt(d[..., :, None] * d[..., None, :])
    theta = np.arccos(np.clip(C / s, -1.0, 1.0))
    return s * (np.sin(theta) + (np.pi - theta) * np.cos(theta)) / (2 * np.pi)


def _risk(z, i2) -> np.ndarray:
    """`ε_g = ½ Σ_ab w_a w_b I2(a, b)` with `w = (v, −A)`, at every leading index of `z`."""
    w = np.concatenate([z["v"], -z["A"]], axis=-1)
    return 0.5 * np.einsum("...a,...ab,...b->...", w, i2(_gram(z["Q"], z["R"], z["T"])), w)


# -- runs ---------------------------------------------------------------------------------------

RUNS = {
    # name: (command, --set overrides, K, M, leading run axis)
    "ode-erf": ("ode", [], 2, 2, None),
    "ode-relu": ("ode", ["model.activation=\"relu\"", "model.M=3", "ode.samples=1024"], 2, 3,
                 None),
    "sgd-weights": ("sgd", [], 2, 2, 3),
    "sgd-overlaps": ("sgd", ["sim.space=\"overlaps\"", "sim.seeds=4"], 2, 2, 4),
    "sde": ("sde", [], 2, 2, 3),
}
SUMMARY_KEYS = {
    "ode": {"risk_final", "risk_final_err", "out"},
    "sgd": {"risk_final", "risk_final_sem", "dim", "seeds", "out"},
    "sde": {"risk_final_mean", "risk_final_std", "risk_final_sem", "dim", "paths",
            "paths_invalid", "first_invalid_t", "out"},
}


@pytest.mark.parametrize("name", list(RUNS))
def test_committee_runs(tmp_path, capsys, name):
    command, sets, K, M, runs = RUNS[name]
    config = _config(tmp_path)
    out = tmp_path / "deep" / name
    argv = [command, str(config), "--json", "--out", str(out)]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 0
    summary = _strict(capsys.readouterr().out.strip().splitlines()[-1])
    assert SUMMARY_KEYS[command] <= set(summary), summary
    assert summary["out"] == str(out)

    # the files, and config.toml loads back to the same configuration
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["config.toml", "meta.json", f"{command}.npz", f"{command}.png"])
    assert (out / f"{command}.png").stat().st_size > 0
    cfg = load_config(config, sets)
    again = load_config(out / "config.toml")
    assert again == cfg and again.fingerprint() == cfg.fingerprint()
    assert again.model_kind == "committee" and (again.model.K, again.model.M) == (K, M)
    meta = _strict((out / "meta.json").read_text())
    assert meta["command"] == command

    # the documented arrays and shapes: (T, ...) for the ODE, (runs, T, ...) for SGD and SDE
    lead = () if runs is None else (runs,)
    with np.load(out / f"{command}.npz") as f:
        z = {k: f[k] for k in f.files}
    np.testing.assert_allclose(z["t"], np.linspace(0.0, 5.0, T_SAVE))
    shapes = {"risk": (T_SAVE,), "risk_err": (T_SAVE,), "Q": (T_SAVE, K, K),
              "R": (T_SAVE, K, M), "T": (T_SAVE, M, M), "v": (T_SAVE, K), "A": (T_SAVE, M)}
    for key, shape in shapes.items():
        assert z[key].shape == (*lead, *shape), (key, z[key].shape)
        assert np.all(np.isfinite(z[key])), key
    assert np.all(z["risk_err"] >= 0)

    # numbers that make sense
    np.testing.assert_allclose(z["Q"], np.swapaxes(z["Q"], -1, -2), atol=1e-6)
    np.testing.assert_allclose(z["v"], 1.0)                 # the second layer is not trained
    np.testing.assert_allclose(z["A"], 1.0)                 # teacher_second_layer: all ones
    T0 = z["T"][..., :1, :, :]
    np.testing.assert_allclose(z["T"], np.broadcast_to(T0, z["T"].shape), atol=1e-5)  # fixed
    np.testing.assert_allclose(np.diagonal(z["T"], axis1=-2, axis2=-1), 1.0,
                               atol=6 / np.sqrt(200))       # T = I + O(D^(-1/2))
    i2 = _i2_relu if "relu" in name else _i2_erf
    closed = _risk(z, i2)
    if command == "ode":
        # ε_g at t = 0 is the closed form of the ODE's own start; the ODE's risk is exact too
        assert z["risk_err"][0] == 0.0
        np.testing.assert_allclose(z["risk"][0], closed[0], rtol=1e-10)
        np.testing.assert_allclose(z["risk"], closed, rtol=1e-8)
        assert z["risk"][-1] < z["risk"][0]                 # it learns
        assert summary["risk_final"] == pytest.approx(z["risk"][-1], rel=1e-12)
        assert summary["risk_final_err"] == pytest.approx(z["risk_err"][-1], abs=1e-15)
        expectation = "qmc" if "relu" in name else "exact"   # the defaults of the two units
        assert again.ode.expectation == expectation
        assert meta["accuracy"]["expectation"] == expectation
        return
    # finite D: the risk is still ε_g of the recorded overlaps (float32 SGD in weight space)
    rtol = 1e-3 if name == "sgd-weights" else 1e-6
    np.testing.assert_allclose(z["risk"], closed, rtol=rtol)
    assert np.all(z["risk"][:, -1] < z["risk"][:, 0])
    final = z["risk"][:, -1]
    if command == "sgd":
        assert summary["dim"] == 200 and summary["seeds"] == runs
        assert z["steps"][-1] == 5 * 200
        assert summary["risk_final"] == pytest.approx(final.mean(), rel=1e-6)
        assert summary["risk_final_sem"] == pytest.approx(
            final.std(ddof=1) / math.sqrt(runs), rel=1e-6)
        assert again.sim.space == ("overlaps" if "overlaps" in name else "weights")
    else:
        assert summary["dim"] == 200 and summary["paths"] == runs
        assert summary["paths_invalid"] == 0 and summary["first_invalid_t"] is None
        assert z["valid"].shape == (runs, T_SAVE) and z["valid"].all()
        assert summary["risk_final_mean"] == pytest.approx(final.mean(), rel=1e-6)
        assert summary["risk_final_std"] == pytest.approx(final.std(ddof=1), rel=1e-6)


# -- commands that do not take the committee ----------------------------------------------------

DOES_NOT_APPLY = {"activations": [], "prune": [], "bayes": []}


def test_sweep_runs_the_committee(tmp_path, capsys):
    """`sweep` over (η, σ): one vmapped ODE per point (the starts drawn in one vectorized
    call), each point's risk and solver step count equal to a separate `ode` run of the same
    config (the same start, exact field and integrator)."""
    from headflow.dynamics.ode import run_ode

    config = _config(tmp_path)
    out = tmp_path / "sw"
    assert main(["sweep", str(config), "--grid", "training.lr=0.25,0.5", "--grid",
                 "model.noise=0,0.2", "--out", str(out), "--json"]) == 0
    summary = _strict(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["shape"] == [2, 2] and summary["status"] == ["ok"] * 4
    with np.load(out / "sweep.npz") as z:
        assert z["Q"].shape == (4, 6, 2, 2) and z["R"].shape == (4, 6, 2, 2)
        risk, steps = z["risk"], z["steps"]
    cfg = load_config(config, ["training.lr=0.5", "model.noise=0.2"])
    alone = run_ode(cfg)
    np.testing.assert_allclose(risk[3], alone.risk, rtol=1e-6)
    assert steps[3] == alone.num_steps and len(set(steps.tolist())) > 1


def test_compare_runs_the_committee(tmp_path, capsys):
    """`compare --theory ode-per-seed`: one ODE per seed from its own start against the SGD
    seeds, reported on the committee's order parameters (Q, R, v) with the ensemble verdicts;
    the files of a comparison are written."""
    out = tmp_path / "cmp"
    assert main(["compare", str(_config(tmp_path)), "--theory", "ode-per-seed", "--seeds", "4",
                 "--out", str(out), "--json"]) == 0
    summary = _strict(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("Q_sup_abs", "R_sup_abs", "v_sup_abs", "verdicts", "escape", "ensemble"):
        assert key in summary, key
    assert "m_sup_abs" not in summary and summary["ode_expectation"] == "exact"
    assert set(summary["ensemble"]) == {"risk", "Q", "R", "v"}
    # 4 seeds a side: too few to resolve the mean verdict, and the rule must not claim one
    assert summary["verdicts"]["mean"]["word"] == "not resolved", summary["verdicts"]["mean"]
    assert summary["verdicts"]["mean"]["sizes"] == [4, 4]
    assert {p.name for p in out.iterdir()} >= {"sgd.npz", "ode_per_seed.npz", "ensemble.npz",
                                               "report.json", "compare.png", "config.toml"}
    with np.load(out / "ode_per_seed.npz") as z:
        assert z["Q"].shape == (4, 6, 2, 2) and z["escape"].shape == (4,)


@pytest.mark.parametrize("command", [*DOES_NOT_APPLY])
def test_attention_commands_refuse_the_committee(tmp_path, capsys, command):
    """(`phases`, `escape` and `scaling` run the committee: tests/test_committee_commands.py.)"""
    config = _config(tmp_path)
    extra = DOES_NOT_APPLY[command]
    out = tmp_path / "fresh" / "out"
    assert main([command, str(config), *extra, "--out", str(out), "--json"]) == 2
    _one_line_error(capsys, f"headflow: error: {command} does not apply to "
                    "model.kind = 'committee': ")
    assert capsys.readouterr().out == ""
    assert not out.exists()
    assert _nothing_but(tmp_path, "committee.toml", "curve.npz") == []


def test_demo_with_a_committee_is_one_line(tmp_path, capsys):
    """`demo` runs the attention model's demo config: another kind through `--set` is refused
    in one line (exit 2, nothing written), pointing to `compare`."""
    out = tmp_path / "d"
    assert main(["demo", "--set", "model.kind=\"committee\"", "--out", str(out)]) == 2
    _one_line_error(capsys, "headflow: error: demo runs the attention model", "compare")
    assert not out.exists() and _nothing_but(tmp_path) == []


# -- bad committee configs ------------------------------------------------------------------------

BAD = [
    # (--set overrides, what the one line must contain)
    (["model.kind=\"transformer\""], "model.kind"),
    (["model.kind=3"], "model.kind"),
    (["model.H=2"], "model.H"),
    (["model.L=4"], "model.L"),
    (["prior.amplitude=2.0"], "[prior]"),
    (["prior.kind=\"one_hot\""], "[prior]"),
    (["training.lr_bias=0.5"], "training.lr_bias"),
    (["model.K=0"], "model.K"),
    (["model.M=0"], "model.M"),
    (["model.K=2.5"], "model.K"),
    (["model.activation=\"softmax\""], "model.activation"),
    (["model.teacher_second_layer=[1.0]"], "model.teacher_second_layer"),
    (["model.teacher_second_layer=[1.0, 1.0, 1.0]"], "model.teacher_second_layer"),
    (["model.teacher_second_layer=[1.0, \"a\"]"], "model.teacher_second_layer"),
    (["model.teacher_second_layer=[[1.0, 1.0]]"], "model.teacher_second_layer"),
    (["model.teacher_second_layer=1.0"], "model.teacher_second_layer"),
    (["model.teacher_second_layer=[1.0, nan]"], "model.teacher_second_layer"),
    (["model.teacher_second_layer=[-inf, 1.0]"], "model.teacher_second_layer"),
    (["model.activation=\"relu\"", "ode.expectation=\"exact\""], "ode.expectation"),
    (["sim.space=\"overlaps\"", "sim.dim=5"], "sim.dim"),        # needs D >= K + M + B + 1 = 6
    (["sim.space=\"overlaps\"", "sim.dim=7", "training.batch=3"], "sim.dim"),
    (["training.lr_second=-0.5"], "training.lr_second"),
    (["training.lr=nan"], "training.lr"),
    (["training.lr=inf"], "training.lr"),
    (["training.lr_second=nan"], "training.lr_second"),
    (["model.noise=nan"], "model.noise"),
    (["model.noise=-inf"], "model.noise"),
    (["training.init_second=inf"], "training.init_second"),
    (["training.init_first_std=nan"], "training.init_first_std"),
    (["training.weight_decay=inf"], "training.weight_decay"),
    (["training.t_max=inf"], "training.t_max"),
    (["sde.dt=nan"], "sde.dt"),
    (["ode.rtol=nan"], "ode.rtol"),
]
BAD += [
    (["model.teacher_second_layer=[1.0, true]"], "model.teacher_second_layer"),
    (["prior.kind=\"flipped_spike\""], "[prior]"),   # even the default prior
]


@pytest.mark.parametrize("sets,key", BAD, ids=[" ".join(s) for s, _ in BAD])
def test_bad_committee_configs(tmp_path, capsys, sets, key):
    config = _config(tmp_path)
    out = tmp_path / "o"
    argv = ["sgd", str(config), "--check", "--json", "--out", str(out)]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    _one_line_error(capsys, "headflow: error:", key)
    assert capsys.readouterr().out == ""
    assert _nothing_but(tmp_path, "committee.toml") == []


@pytest.mark.parametrize("body,key", [
    ('[model]\nkind = "committee"\nH = 2\n', "model.H"),
    ('[model]\nkind = "committee"\n[prior]\nkind = "one_hot"\n', "[prior]"),
    ('[model]\nkind = "committee"\nteacher_second_layer = [1.0, nan]\n',
     "model.teacher_second_layer"),
    ('[model]\nkind = "committee"\nnoise = inf\n', "model.noise"),
    ('[model]\nkind = "committee"\n[training]\nlr = nan\n', "training.lr"),
    ('[model]\nkind = "committee"\n[training]\nlr_second = -inf\n', "training.lr_second"),
    ('[model]\nkind = "committee"\n[training]\nt_max = 5.0\nlr_schedule = {kind = "linear", '
     'times = [0.0, 5.0], values = [0.5, nan]}\n', "training.lr_schedule"),
    ('[model]\nkind = "committee"\n[sde]\ndt = -inf\n', "sde.dt"),
    ('[model]\nkind = "committee"\n[output]\nt_min = nan\nspacing = "log"\n', "output.t_min"),
    ('[model]\nkind = "nonesuch"\n', "model.kind"),
    ('[ode]\nexpectation = "exact"\n', "ode.expectation"),     # the attention model
])
@pytest.mark.parametrize("command", ["ode", "sgd", "sde"])
def test_bad_config_files(tmp_path, capsys, body, key, command):
    """Literal nan/inf in the TOML file, and keys of the other model, for each command that runs
    the committee; without --check: the error comes before anything is computed or written."""
    config = _config(tmp_path, body)
    out = tmp_path / "a" / "b"
    assert main([command, str(config), "--json", "--out", str(out)]) == 2
    _one_line_error(capsys, "headflow: error:", key)
    assert capsys.readouterr().out == ""
    assert _nothing_but(tmp_path, "committee.toml") == []


# -- --check and --help -------------------------------------------------------------------------

def test_check_and_help(tmp_path, capsys):
    config = _config(tmp_path)
    for command in ("ode", "sgd", "sde"):
        out = tmp_path / command
        assert main([command, str(config), "--check", "--json", "--out", str(out)]) == 0
        summary = _strict(capsys.readouterr().out.strip().splitlines()[-1])
        assert summary == {"checked": True, "out": str(out)}
        assert not out.exists()
    with pytest.raises(SystemExit) as info:
        main(["sgd", "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "committee" in text and "Example: headflow sgd" in text
