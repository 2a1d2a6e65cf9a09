"""Finite-size scaling (validation/experiments/scaling.py, `headflow scaling`): the deviation's
definition and its exact split, the log-log fit, and the command end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from headflow.dynamics import HeadflowError
from headflow.validation.cli import main
from headflow.validation.experiments._fit import law_check
from headflow.validation.experiments.scaling import deviation, loglog_fit, order_vector

from _util import strict_json
from test_escape import CI_CONFIG

H, F = 2, 1
SHAPES = {"m": (H, F), "q": (H, H), "n": (H,), "s": (H, H), "b": (H,)}


def _runs(rng, S: int, t: np.ndarray):
    """Random seed arrays `(S, T, …)` and an ODE `(T, …)` of the order parameters and risk."""
    ode = {k: rng.standard_normal((len(t), *v)) for k, v in SHAPES.items()}
    ode["risk"] = 0.5 + rng.random(len(t))
    sgd = {k: ode[k] + 0.1 * rng.standard_normal((S, *ode[k].shape)) for k in SHAPES}
    sgd["risk"] = ode["risk"] * (1 + 0.05 * rng.standard_normal((S, len(t))))
    sgd["t"] = ode["t"] = t
    return sgd, ode


def test_deviation_is_the_rms_over_seeds_and_window_and_splits_exactly():
    rng = np.random.default_rng(0)
    t = np.linspace(0.0, 3.0, 7)                    # saves at 0, 0.5, …, 3
    S = 5
    sgd, ode = _runs(rng, S, t)
    rep = deviation(sgd, ode, t_window=1.2)
    w = [1, 2]                                      # 0 < t ≤ 1.2: t = 0.5 and 1.0
    assert rep["points"] == 2
    sq = [sum(np.sum((sgd[k][i, j] - ode[k][j]) ** 2) for k in SHAPES)
          for i in range(S) for j in w]
    assert rep["delta"] == pytest.approx(np.sqrt(np.mean(sq)), rel=1e-13)
    # δ² = bias² + spread² (the seed mean's distance from the ODE, the spread about it)
    assert rep["delta"] ** 2 == pytest.approx(rep["bias"] ** 2 + rep["spread"] ** 2, rel=1e-12)
    assert rep["noise_level"] == pytest.approx(rep["spread"] / np.sqrt(S), rel=1e-15)
    rel = (sgd["risk"][:, w] - ode["risk"][w]) / ode["risk"][w]
    assert rep["risk_rms"] == pytest.approx(np.sqrt(np.mean(rel ** 2)), rel=1e-13)
    assert 0 < rep["delta_se"] < rep["delta"]
    # t = 0 is never in the window, and the order vector holds every entry once
    assert order_vector(ode, 1).shape == (len(t), sum(int(np.prod(v)) for v in SHAPES.values()))
    with pytest.raises(HeadflowError, match="holds no saved time"):
        deviation(sgd, ode, t_window=0.4)


def test_loglog_fit_recovers_a_power_law_and_its_interval_covers():
    dims = np.array([250, 500, 1000, 2000, 4000])
    exact = loglog_fit(dims, 3.0 * dims ** -0.5)
    assert exact["slope"] == pytest.approx(-0.5, abs=1e-12)
    assert exact["intercept"] == pytest.approx(np.log(3.0), abs=1e-12)
    # with log-normal scatter the 95% interval covers the true slope 95% of the time
    rng = np.random.default_rng(1)
    n_rep = 400
    hits = sum(lo <= -0.5 <= hi for lo, hi in (
        loglog_fit(dims, dims ** -0.5 * np.exp(0.1 * rng.standard_normal(len(dims))))["ci"]
        for _ in range(n_rep)))
    p = hits / n_rep
    assert abs(p - 0.95) < 5 * np.sqrt(0.95 * 0.05 / n_rep)


def test_law_check_against_known_errors():
    """The weighted slope and its error equal numpy's weighted fit with unscaled covariance;
    an exact law has χ² = 0; with Gaussian errors of the stated size, χ² follows its law
    (5% of p below 0.05) and the weighted slope's z-score has unit spread."""
    x = np.log(np.array([250, 500, 1000, 2000, 4000.0]))
    sigma = np.array([0.08, 0.06, 0.08, 0.07, 0.09])
    exact = law_check(x, 1.3 - 0.5 * x, sigma, -0.5)
    assert exact["chi2"] == pytest.approx(0.0, abs=1e-24) and exact["dof"] == 4
    assert exact["p"] == pytest.approx(1.0)
    rng = np.random.default_rng(2)
    y = 1.3 - 0.4 * x + sigma * rng.standard_normal(len(x))
    got = law_check(x, y, sigma, -0.5)
    coef, cov = np.polyfit(x, y, 1, w=1.0 / sigma, cov="unscaled")
    assert got["weighted_slope"] == pytest.approx(coef[0], rel=1e-12)
    assert got["weighted_stderr"] == pytest.approx(np.sqrt(cov[0, 0]), rel=1e-12)
    c = np.sum((y + 0.5 * x) / sigma**2) / np.sum(1 / sigma**2)
    assert got["chi2"] == pytest.approx(np.sum(((y + 0.5 * x - c) / sigma) ** 2), rel=1e-12)
    n_rep = 2000
    reps = [law_check(x, 1.3 - 0.5 * x + sigma * rng.standard_normal(len(x)), sigma, -0.5)
            for _ in range(n_rep)]
    frac = np.mean([r["p"] < 0.05 for r in reps])
    assert abs(frac - 0.05) < 5 * np.sqrt(0.05 * 0.95 / n_rep)
    z = np.array([(r["weighted_slope"] + 0.5) / r["weighted_stderr"] for r in reps])
    assert abs(z.std() - 1.0) < 5 * np.sqrt(0.5 / n_rep) and abs(z.mean()) < 5 / np.sqrt(n_rep)


# the escape tests' CI experiment (two softmax heads, flipped spike), short, as the overlap chain
CONFIG = (CI_CONFIG.replace("t_max = 10.0", "t_max = 2.0")
          .replace("samples = 2048", "samples = 256")
          .replace("seeds = 32", 'seeds = 3\nspace = "overlaps"')
          .replace("n_save = 101", "n_save = 21"))


def test_scaling_command_small(tmp_path, capsys):
    """End to end on a tiny problem: files, the report's consistency with its arrays, the
    fitted slope, the verdict line; then bad inputs are one-line errors that leave nothing."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    out = tmp_path / "run"
    assert main(["scaling", str(cfg), "--dims", "400,800,1600", "--out", str(out),
                 "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    summary = strict_json(lines[-1])
    for name in ("scaling.json", "scaling.npz", "scaling.png", "config.toml", "meta.json"):
        assert (out / name).exists()
    report = json.loads((out / "scaling.json").read_text())
    assert report["dims"] == summary["dims"] == [400, 800, 1600]
    assert summary["out"] == str(out) and report["seeds"] == 3
    arr = np.load(out / "scaling.npz")
    assert arr["risk_sgd_mean"].shape == arr["risk_ode"].shape == (3, 21)
    d, b, s = (np.asarray(report[k]) for k in ("delta", "bias", "spread"))
    np.testing.assert_allclose(d ** 2, b ** 2 + s ** 2, rtol=1e-12)
    np.testing.assert_allclose(arr["delta"], d, rtol=0)
    fit = stats.linregress(np.log([400, 800, 1600]), np.log(d))
    assert report["slope"] == pytest.approx(fit.slope, rel=1e-12)
    lo, hi = report["slope_ci"]
    assert report["reproduced"] == (lo <= -0.5 <= hi)
    assert 0 < report["t_window"] <= 2.0 and min(report["points"]) >= 1
    assert [r["space"] for r in report["per_dim"]] == ["overlaps"] * 3
    assert any(line.startswith("verdict: the RMS distance") for line in lines)
    law = report["law"]
    check = law_check(np.log([400, 800, 1600]), np.log(d),
                      np.asarray(report["delta_se"]) / d, -0.5)
    assert law == pytest.approx(check, rel=1e-12) and law["dof"] == 2
    assert any(line.startswith("diagnostic (not the verdict), with the bootstrap errors")
               for line in lines)

    for argv, needle in [(["--dims", "200,400"], "at least three"),
                         (["--dims", "200,400,800", "--seeds", "1"], "at least 2 seeds"),
                         (["--dims", "2,400,800", "--set", "model.F=2"], "must exceed")]:
        bad = tmp_path / "bad" / "out"
        assert main(["scaling", str(cfg), *argv, "--out", str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, err
        assert not (tmp_path / "bad").exists()
