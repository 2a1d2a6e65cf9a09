"""`headflow sde`: its files, its JSON summary and its bad inputs (one line, exit 2, nothing
left behind)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from headflow.validation.cli import main

ROOT = Path(__file__).resolve().parents[1]
from _util import one_line_error as _one_line_error  # noqa: E402
from _util import strict_json as _strict  # noqa: E402

TINY = ["--set", "model.L=3", "--set", "training.t_max=1", "--set", "output.n_save=3",
        "--set", "sde.dt=0.5", "--set", "sde.samples_drift=256", "--set",
        "sde.samples_noise=64", "--set", "sim.risk_samples=256"]


def _nothing(root: Path) -> list[Path]:
    return sorted(root.rglob("*")) if root.exists() else []


def test_sde_writes_results(tmp_path, capsys):
    out = tmp_path / "a" / "run"
    assert main(["sde", *TINY, "--dim", "300", "--paths", "3", "--out", str(out),
                 "--json"]) == 0
    summary = _strict(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("risk_final_mean", "risk_final_std", "escape_quantiles", "out", "dim", "paths",
                "paths_invalid"):
        assert key in summary, key
    assert summary["dim"] == 300 and summary["paths"] == 3 and summary["out"] == str(out)
    assert set(summary["escape_quantiles"]) == {"0.1", "0.25", "0.5", "0.75", "0.9"}
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", "meta.json", "sde.npz",
                                                     "sde.png"]
    with np.load(out / "sde.npz") as z:
        T = len(z["t"])
        assert T == 3 and z["risk"].shape == (3, T) == z["risk_err"].shape
        assert z["m"].shape == (3, T, 2, 1) and z["q"].shape == (3, T, 2, 2)
        assert z["kv"].shape == (3, T, 2, 2) and z["vks"].shape == (3, T, 2, 1)
        assert z["valid"].shape == (3, T) and z["escape"].shape == (3,)
        np.testing.assert_allclose(z["risk"][:, -1].mean(), summary["risk_final_mean"])
        np.testing.assert_allclose(z["risk"][:, -1].std(ddof=1), summary["risk_final_std"])
    meta = _strict((out / "meta.json").read_text())
    assert meta["command"] == "sde" and meta["sde"]["paths"] == 3
    assert meta["sde"]["samples_noise"] == 64 and meta["sde"]["samples_drift"] == 256
    assert "[sde]" in (out / "config.toml").read_text()


def test_sde_check_and_help(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["sde", "--dim", "500", "--paths", "2", "--out", str(out), "--check",
                 "--json"]) == 0
    assert _strict(capsys.readouterr().out.strip().splitlines()[-1])["checked"] is True
    assert not out.exists()
    with pytest.raises(SystemExit):
        main(["sde", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Example: headflow sde" in text and "README (section Configuration)" in text


@pytest.mark.parametrize("argv", [["--paths", "0"], ["--dim", "0"], ["--dim", "-5"],
                                  ["--paths", "x"], ["--paths", "2.5"], ["--paths", "-1"]])
def test_sde_argument_errors(tmp_path, capsys, argv):
    with pytest.raises(SystemExit) as info:
        main(["sde", *argv, "--out", str(tmp_path / "o")])
    assert info.value.code == 2
    _one_line_error(capsys)
    assert _nothing(tmp_path) == []


@pytest.mark.parametrize("sets,key", [
    (["sde.dt=0"], "sde.dt"), (["sde.dt=nan"], "sde.dt"), (["sde.dt=-1"], "sde.dt"),
    (["sde.dt=500"], "sde.dt"), (["sde.solver=heun"], "Stratonovich"),
    (["sde.samples_noise=10"], "sde.samples_noise"), (["sde.samples_drift=0"], "sde.samples_drift"),
    (["sde.noise=cholesky"], "sde.noise"), (["sde.paths=0"], "sde.paths"),
    (["sde.seed=-1"], "sde.seed"), (["sde.bogus=1"], "sde.bogus"), (["sim.dim=1"], "sim.dim"),
])
def test_sde_config_errors(tmp_path, capsys, sets, key):
    argv = ["sde", "--out", str(tmp_path / "o"), "--json"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    _one_line_error(capsys, key)
    assert capsys.readouterr().out == ""
    assert _nothing(tmp_path) == []


def test_sde_non_finite_paths_are_an_error(tmp_path, capsys):
    """A run whose paths blow up is a one-line error naming how many paths and when; nothing is
    written."""
    out = tmp_path / "x" / "run"
    assert main(["sde", *TINY, "--set", "training.lr=1000", "--dim", "100", "--paths", "2",
                 "--out", str(out)]) == 2
    _one_line_error(capsys, "2 of 2 SDE paths diverged", "sde.dt")
    assert _nothing(tmp_path) == []


def test_sde_interrupt_leaves_nothing(tmp_path):
    """SIGINT during a run (its temporary folder exists): exit 130, `headflow: interrupted`,
    no output folder and no parent folder left."""
    out = tmp_path / "deep" / "run"
    env = {**os.environ, "HEADFLOW_CACHE": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "headflow.validation", "sde", "--set", "training.t_max=500",
         "--set", "sde.paths=64", "--set", "sde.samples_drift=1024", "--dim", "500",
         "--out", str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / "deep").exists() and time.monotonic() < deadline:
        time.sleep(0.2)                 # the run folder is being written: the run has started
    assert (tmp_path / "deep").exists(), "the run did not start"
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "headflow: interrupted" in err
    assert _nothing(tmp_path) == []
