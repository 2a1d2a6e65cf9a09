"""Escape times versus D (validation/escape.py, `headflow escape`): the least-squares slope and
its interval, the prediction from a growth curve, and (slow, CI) the SGD escape-time slope in
ln D against the linear-stability prediction."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from scipy import stats

from headflow.validation.cli import main
from headflow.validation.experiments.escape import (LinearTheory, calibrate_offset, escape_study,
                                                    fit_slope, predicted_slope)

DIMS = [250, 500, 1000, 2000]

# The CI configuration: two softmax heads, flipped spike θ = ±7 (p = 0.7). The heads align
# with the mean direction by t ≈ 1.5 and escape at t ≈ 2.5–4 for D = 250..2000 (λ ≈ 0.75), so
# SGD over 32 seeds and the four dimensions, plus the linear stability, take about two minutes
# on 2 cores. (validation/configs/escape.toml is the same experiment.)
CI_CONFIG = """
[model]
L = 4
H = 2
F = 1
activation = "softmax"

[prior]
kind = "flipped_spike"
amplitude = 7.0
p = 0.7

[training]
lr = 1.0
t_max = 10.0

[ode]
expectation = "qmc"
samples = 2048

[sim]
seeds = 32

[output]
n_save = 101
"""


@dataclasses.dataclass
class _Result:
    t: np.ndarray
    growth_rate: np.ndarray


def _theory(lam, t, log_s0):
    """A linear theory whose spreads grow exactly like `s0 e^{λt}` (one row per draw)."""
    logs = lam * t[None, :] + np.asarray(log_s0)[:, None]
    return LinearTheory(result=_Result(t=t, growth_rate=np.full_like(t, lam)), log_spread=logs,
                        threshold=0.2)


def test_fit_slope_interval_and_coverage():
    rng = np.random.default_rng(0)
    dims, b, sigma = np.array(DIMS), 1.3, 0.8
    x = np.log(dims)
    hits, n_rep = 0, 400
    for _ in range(n_rep):
        times = 2.0 + b * x[:, None] + sigma * rng.standard_normal((len(dims), 16))
        fit = fit_slope(dims, times)
        hits += fit["ci"][0] <= b <= fit["ci"][1]
    # a 95% interval covers the true slope 95% of the time (binomial 5σ band)
    p = hits / n_rep
    assert abs(p - 0.95) < 5 * np.sqrt(0.95 * 0.05 / n_rep)
    # its standard error is the textbook one
    times = 2.0 + b * x[:, None] + sigma * rng.standard_normal((len(dims), 16))
    times[-1, :3] = np.nan                                   # censored runs are left out
    fit = fit_slope(dims, times)
    xs = np.repeat(x, 16)[np.isfinite(times.ravel())]
    ys = times.ravel()[np.isfinite(times.ravel())]
    A = np.stack([np.ones_like(xs), xs], axis=1)
    coef, res, *_ = np.linalg.lstsq(A, ys, rcond=None)
    s2 = res[0] / (len(ys) - 2)
    se = np.sqrt(s2 / np.sum((xs - xs.mean()) ** 2))
    assert fit["slope"] == pytest.approx(coef[1], rel=1e-12)
    assert fit["stderr"] == pytest.approx(se, rel=1e-10)
    half = stats.t.ppf(0.975, len(ys) - 2) * se
    assert fit["ci"] == pytest.approx([coef[1] - half, coef[1] + half], rel=1e-10)
    assert fit["runs"] == 61


@pytest.mark.parametrize("offset", [-1.0, 0.0, 0.7])
def test_prediction_for_a_stationary_rate(offset):
    """With a constant rate λ the predicted escape is `(ln θ + ½ ln D + c' − ln s0)/λ`, its slope
    in ln D is exactly `1/(2λ)` whatever the offset, and the offset is recovered from escape
    times generated with it."""
    lam = 0.6
    t = np.linspace(0.0, 40.0, 4001)
    theory = _theory(lam, t, np.log([0.05, 0.1, 0.2]))      # median draw: s0 = 0.1
    dims = np.array(DIMS, dtype=float)
    want = (np.log(0.2) + 0.5 * np.log(dims) + offset - np.log(0.1)) / lam
    np.testing.assert_allclose(theory.escape_times(dims, offset), want, atol=1e-9)
    times = np.repeat(want[:, None], 8, axis=1)
    assert predicted_slope(theory, dims, times, offset) == pytest.approx(1 / (2 * lam),
                                                                          rel=1e-9)
    assert calibrate_offset(theory, dims, times) == pytest.approx(offset, abs=1e-5)
    # per-draw (parameter-free) times: one row per draw
    per = theory.draw_escape_times(dims)
    np.testing.assert_allclose(per[1], (np.log(0.2) + 0.5 * np.log(dims) - np.log(0.1)) / lam,
                               atol=1e-9)


def test_escape_command_rejects_bad_input(tmp_path, capsys):
    out = tmp_path / "e"
    for argv in (["escape", "--dims", "250", "--out", str(out)],
                 ["escape", "--dims", "250,x", "--out", str(out)],
                 ["escape", "--set", "model.H=1", "--dims", "100,200", "--out", str(out)],
                 ["escape", "--dims", "100,200", "--threshold", "-1", "--out", str(out)]):
        with pytest.raises(SystemExit) as exc:
            rc = main(argv)
            raise SystemExit(rc)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "error" in err[0]
        assert not out.exists()


@pytest.mark.slow
@pytest.mark.fast_compile
def test_escape_command_small(tmp_path, capsys):
    """End to end on a tiny problem, with the SDE (2 paths per D, one extrapolated D): files,
    JSON keys and shapes, consistency of the report."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(CI_CONFIG.replace("samples = 2048", "samples = 256")
                   .replace("seeds = 32", "seeds = 3").replace("n_save = 101", "n_save = 51"))
    out = tmp_path / "run"
    rc = main(["escape", str(cfg), "--dims", "150,300", "--n-times", "31", "--out", str(out),
               "--paths", "2", "--extrapolate", "100000", "--set", "sde.dt=0.1",
               "--set", "sde.samples_noise=64", "--set", "sde.samples_drift=64", "--json"])
    assert rc == 0
    lines = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(lines[-1])
    for key in ("lambda", "slope_predicted", "slope_measured", "slope_ci", "out", "slope_sde",
                "slope_sde_ci", "agrees_sde_mean", "agrees_sde_slope", "agrees_sde"):
        assert key in summary
    for name in ("escape.json", "escape.npz", "escape.png", "config.toml", "meta.json"):
        assert (out / name).exists()
    assert json.loads((out / "escape.json").read_text())["escape_sde_mean"] == \
        summary["escape_sde_mean"]
    arr = np.load(out / "escape.npz")
    assert arr["escape_times"].shape == (2, 3)
    assert arr["sde_escape_times"].shape == (2, 2)
    assert arr["extrapolate_escape_times"].shape == (1, 2)
    assert list(arr["extrapolate_dims"]) == [100000]
    assert summary["lambda"] == pytest.approx(1 / (2 * summary["slope_predicted"]))
    assert len(summary["escape_sde_mean"]) == 2 and len(summary["agrees_sde_mean"]) == 2
    assert [set(q) for q in summary["escape_sde_quantiles"]] == [{"0.1", "0.5", "0.9"}] * 2
    (ext,) = summary["extrapolation"]
    assert ext["dim"] == 100000 and ext["runs"] == 2
    assert ext["escaped"] + ext["censored"] == 2
    sde = arr["sde_escape_times"]
    for i in range(2):
        ok = np.isfinite(sde[i])
        assert summary["escape_sde_escaped_fraction"][i] == ok.mean()
        if ok.any():
            assert summary["escape_sde_mean"][i] == pytest.approx(sde[i][ok].mean())
    assert summary["paths_sde"] == 2 and summary["sde_settings"]["dt"] == 0.1
    assert any(line.startswith("verdict: SDE mean inside") for line in lines)
    assert any("calibrated linear stability" in line for line in lines)
    assert json.loads((out / "meta.json").read_text())["sde_paths"] == 2


@pytest.mark.slow
def test_sgd_escape_slope_agrees_with_linear_stability():
    """The `docs/phases.md#the-papers-claims` claim, measured: the SGD escape time grows like `ln
    D` with the slope the
    tangent-linear equation along the symmetric trajectory predicts (inside the 95% interval of
    the measured slope), and the slope is positive and well resolved. SGD runs as the exact
    overlap-space chain (`docs/overlap-sgd.md`, the same law as the weight-space simulator by
    `tests/test_overlap_sgd.py`), which here is 3-4 times cheaper than the weight-space steps."""
    import tomllib

    from headflow.dynamics import Config

    cfg = Config.from_dict(tomllib.loads(CI_CONFIG)).replace(**{"sim.space": "overlaps"})
    report, arrays = escape_study(cfg, DIMS, 32, n_times=61)
    assert report["sde"] is False and "slope_sde" not in report       # no SDE unless asked
    lo, hi = report["slope_ci"]
    print(f"λ_eff = {report['lambda']:.3f}, slope predicted {report['slope_predicted']:.3f} "
          f"(initial perturbation only {report['slope_predicted_initial']:.3f}), measured "
          f"{report['slope_measured']:.3f} [{lo:.3f}, {hi:.3f}], censored {report['censored']}")
    assert sum(report["censored"]) <= 3, report["censored"]
    assert lo <= report["slope_predicted"] <= hi, report
    assert lo > 0, report                                   # escape really grows with D
    assert report["lambda"] > 0
    # the instantaneous eigenvalue is of the same size as the exact growth rate at the escapes
    lam, gr = np.array(report["lambda_at_escape"]), np.array(report["growth_rate_at_escape"])
    assert np.all(np.abs(lam - gr) < 0.5 * gr)
    assert np.all(np.isfinite(arrays["escape_times"]).sum(axis=1) >= 30)
