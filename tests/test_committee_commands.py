"""`headflow phases`, `escape` and `scaling` on the committee machine (docs/committee.md): the
shared experiments read the student units' alignment with the teacher's units off the model's
layout (`(R, Q)`), so each command runs a committee config with the report of the attention
model; `escape` adds the linear-stability prediction of the symmetric plateau (unit-difference
modes, `headflow.dynamics.analysis.UnitModes`).

Tiny runs (K = M = 2 erf units, η = 1, SGD as the exact overlap chain, whose cost per step does
not depend on D), each well under a minute on two cores. The attention model's outputs of these
commands are covered by tests/test_phases.py, test_escape.py, test_escape_sde.py and
test_scaling.py; the refactoring left them unchanged to the bit (the attention run of each
command compared before and after, new report keys apart: `linear_stability`,
`linear_stability_reason`, `order_parameters`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from _util import one_line_error as _one_line_error
from _util import strict_json as _strict
from headflow.dynamics.measures import escape_time, persistent_crossing
from headflow.validation.cli import main

pytestmark = pytest.mark.fast_compile

COMMITTEE = """\
[model]
kind = "committee"
K = 2
M = 2
activation = "erf"

[training]
lr = 1.0
t_max = 100.0

[sim]
dim = 400
seeds = 3
space = "overlaps"

[output]
n_save = 51

[sde]
paths = 4
dt = 0.25
samples_noise = 256
"""


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "committee.toml"
    path.write_text(COMMITTEE)
    return path


def _run(capsys, argv: list[str]) -> tuple[dict, list[str]]:
    assert main([*argv, "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    return _strict(lines[-1]), lines[:-1]


def test_phases_runs_the_committee(tmp_path, capsys):
    """The plateau and the specialization of R from the SGD seeds and the ODE: every seed and
    the ODE escape (the students then align with different teachers, |α| ≈ 1), each escape
    equal to `headflow.dynamics.measures.escape_time` of its (R, Q); the attention-only field option
    is not reported."""
    out = tmp_path / "ph"
    summary, lines = _run(capsys, ["phases", str(_config(tmp_path)), "--out", str(out)])
    assert summary["alignment"] == ["R", "Q"] and summary["model_kind"] == "committee"
    assert "equivariant_field" not in summary
    for name in ("phases.json", "phases_ode.png", "phases_sgd.png", "sgd.npz", "ode.npz"):
        assert (out / name).exists(), name
    full = json.loads((out / "phases.json").read_text())
    with np.load(out / "sgd.npz") as z:
        t, R, Q = z["t"], z["R"], z["Q"]
    assert R.shape == (3, 51, 2, 2)
    for i, seed in enumerate(full["sgd"]["per_seed"]):
        exit_ = seed["plateau_exit"]
        assert exit_ == pytest.approx(escape_time(t, R[i], Q[i]), rel=1e-12)
        assert 0 < exit_ < 100
        assert seed["plateau_entry"] is not None and seed["plateau_entry"] <= exit_
        assert {s["feature"] for s in seed["stages"]} <= {1, 2}
    sgd = summary["sgd"]
    assert sgd["seeds"] == sgd["escaped"] == 3
    assert math.isfinite(sgd["plateau_exit_mean"]) and math.isfinite(sgd["plateau_exit_sem"])
    assert sum(sgd["stage_orders"].values()) == 3
    ode = summary["ode"]
    assert 0 < ode["plateau_entry"] <= ode["plateau_exit"] < 100
    (stage,) = ode["stages"]
    assert stage["time"] == ode["plateau_exit"] and sorted(stage["children"]) == [[1], [2]]
    # specialized: each student ends aligned with its own teacher unit
    teachers = {a["feature"] for a in ode["assignment"]}
    assert teachers == {1, 2}
    assert all(a["sign"] == 1 and max(a["alignment"]) > 0.8 and min(a["alignment"]) < 0.3
               for a in ode["assignment"])
    assert summary["stage_order_ode"] == [stage["feature"]]
    assert lines[0].startswith("ODE: plateau ") and f"n{stage['feature']} at t=" in lines[0]
    assert lines[1].startswith("SGD: 3/3 seeds escaped")


def test_escape_runs_the_committee(tmp_path, capsys):
    """Escape times versus ln D with the SDE prediction: SGD escape times finite where the runs
    escaped (as `escape_time` of the seeds' spread says), the fitted slope with its interval,
    SDE escape times later at larger D (positive slope over the extrapolation); the
    linear-stability prediction along the symmetric plateau: its parameter-free escape times
    grow with D with the slope `1/(2λ)` of the growth rate at the escape."""
    out = tmp_path / "esc"
    summary, lines = _run(capsys, ["escape", str(_config(tmp_path)), "--dims", "400,1600",
                                   "--seeds", "4", "--t-max", "120", "--set",
                                   "output.n_save=61", "--set", "sde.dt=0.5",
                                   "--extrapolate", "10000", "--n-times", "61",
                                   "--out", str(out)])
    assert summary["linear_stability"] is True and summary["linear_stability_reason"] is None
    pf = summary["escape_predicted_initial"]
    assert pf[0] is not None and pf[1] is not None and 0 < pf[0] < pf[1] < 120
    lam = summary["growth_rate_at_escape"]
    print(f"committee linear stability: parameter-free escapes {pf}, slope "
          f"{summary['slope_predicted_initial']:.2f}, growth rates at the escapes {lam}")
    assert any(line.startswith("  parameter-free linear stability") for line in lines)
    for name in ("escape.json", "escape.npz", "escape.png", "config.toml", "meta.json"):
        assert (out / name).exists(), name
    with np.load(out / "escape.npz") as z:
        times, spread = z["escape_times"], z["sgd_spread"]
        sde, ext = z["sde_escape_times"], z["extrapolate_escape_times"]
        sgd_t = z["sgd_t"]
        assert "predicted" in z.files and "growth_rate" in z.files
    assert times.shape == (2, 4) and spread.shape == (2, 4, 61) and sde.shape == (2, 4)
    # each run's escape is the persistent crossing of its spread (the layout's (R, Q))
    for i in range(2):
        for s in range(4):
            c = persistent_crossing(sgd_t, spread[i, s], 0.2)
            assert times[i, s] == pytest.approx(np.nan if c is None else c, abs=0.05,
                                                nan_ok=True)
    escaped = np.isfinite(times)
    assert escaped.sum() >= 6 and summary["censored"] == [int(c) for c in (~escaped).sum(1)]
    assert np.all((times[escaped] > 0) & (times[escaped] <= 120))
    for i in range(2):
        assert summary["escape_mean"][i] == pytest.approx(times[i][escaped[i]].mean())
    lo, hi = summary["slope_ci"]
    assert math.isfinite(summary["slope_measured"]) and lo < summary["slope_measured"] < hi
    assert np.isfinite(sde).all() and np.isfinite(ext).sum() >= 3
    assert summary["slope_sde"] is not None and summary["slope_sde_all"] > 0
    # medians with a path that did not escape by t_max counted at +inf
    med = [float(np.median(np.where(np.isnan(x), np.inf, x))) for x in (sde[0], sde[1], ext)]
    assert med[2] > med[1] > med[0], med
    assert summary["paths_sde"] == 4
    assert lines[0].startswith("escape slope in ln D: measured ")
    print(f"committee escape: SGD means {summary['escape_mean']}, slope "
          f"{summary['slope_measured']:.2f}; SDE means {summary['escape_sde_mean']}, "
          f"extrapolated {summary['extrapolation'][0]['mean']:.2f}")


def test_scaling_runs_the_committee(tmp_path, capsys):
    """The RMS distance of single SGD runs from the ODE on (Q, R, v) before the escape falls
    with D, with a log-log slope near −1/2."""
    out = tmp_path / "sc"
    summary, lines = _run(capsys, ["scaling", str(_config(tmp_path)), "--dims", "500,2000,8000",
                                   "--seeds", "8", "--set", "training.t_max=10", "--set",
                                   "output.n_save=21", "--out", str(out)])
    assert summary["order_parameters"] == ["Q", "R", "v"]
    for name in ("scaling.json", "scaling.npz", "scaling.png", "config.toml", "meta.json"):
        assert (out / name).exists(), name
    d, se = np.asarray(summary["delta"]), np.asarray(summary["delta_se"])
    assert np.all(np.isfinite(d) & (d > 0)) and np.all(se > 0)
    assert np.all(np.diff(d) < 0)
    np.testing.assert_allclose(d ** 2, np.asarray(summary["bias"]) ** 2
                               + np.asarray(summary["spread"]) ** 2, rtol=1e-12)
    lo, hi = summary["slope_ci"]
    print(f"committee scaling: delta {d}, slope {summary['slope']:.3f} [{lo:.3f}, {hi:.3f}]")
    assert -1.0 < summary["slope"] < -0.2 and lo < summary["slope"] < hi
    assert summary["t_window"] == pytest.approx(10.0) and summary["points"] == [20] * 3
    assert [r["space"] for r in summary["per_dim"]] == ["overlaps"] * 3
    assert any(line.startswith("verdict: the RMS distance") for line in lines)


@pytest.mark.parametrize("command,extra,needle", [
    ("phases", ["--set", "model.K=1"], "model.K = 1: phases need at least 2 student units"),
    ("phases", ["--engine-field"], "--engine-field: "),
    ("escape", ["--dims", "400,800", "--engine-field"], "--engine-field: chooses the nodes"),
    ("escape", ["--dims", "3,800"], "dimension 3: sim.dim = 3: sim.space = 'overlaps' needs"),
    ("scaling", ["--dims", "3,800,1600"], "dimension 3: "),
])
def test_committee_bad_input_is_one_line(tmp_path, capsys, command, extra, needle):
    config = _config(tmp_path)
    out = tmp_path / "fresh" / "out"
    assert main([command, str(config), *extra, "--out", str(out)]) == 2
    _one_line_error(capsys, f"headflow: error: {needle}")
    assert not out.exists() and not (tmp_path / "fresh").exists()
