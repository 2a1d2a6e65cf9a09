"""The parameter-free SDE side of `headflow escape` (validation/experiments/escape.py:
`escape_stats`, `sde_report`; validation/commands/escape.py): per-D statistics with censored
paths, the ln D slope by the same fit as the measured one, the agreement verdict, the text
report and the command's bad inputs. The end-to-end run with the SDE is
`tests/test_escape.py::test_escape_command_small`."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from scipy import stats

from headflow.validation._json import dumps
from headflow.validation.cli import main
from headflow.validation.commands.escape import extrapolate_list, summary_lines
from headflow.validation.experiments.escape import escape_stats, fit_slope, sde_report

DIMS = [250, 500, 1000]


def test_escape_stats_with_censored_runs():
    """Censored runs (NaN) are counted, left out of the mean and its interval, and push the
    quantiles beyond the escaped fraction to +∞ (null in JSON)."""
    st = escape_stats([1.0, 2.0, 3.0, np.nan, np.nan])
    assert st["mean"] == pytest.approx(2.0)
    assert st["sem"] == pytest.approx(1.0 / np.sqrt(3))
    half = stats.t.ppf(0.975, 2) / np.sqrt(3)
    assert st["ci"] == pytest.approx([2.0 - half, 2.0 + half])
    assert (st["runs"], st["escaped"], st["censored"]) == (5, 3, 2)
    assert st["escaped_fraction"] == pytest.approx(0.6)
    assert set(st["quantiles"]) == {"0.1", "0.5", "0.9"}
    assert st["quantiles"]["0.1"] == 1.0 and st["median"] == 3.0
    assert np.isinf(st["quantiles"]["0.9"])
    assert json.loads(dumps(st))["quantiles"]["0.9"] is None
    none = escape_stats([np.nan, np.nan])
    assert none["mean"] is None and none["ci"] is None and none["escaped_fraction"] == 0.0
    assert all(np.isinf(v) for v in none["quantiles"].values())
    one = escape_stats([4.0, np.nan])
    assert one["mean"] == 4.0 and one["sem"] is None and one["ci"] is None


def test_sde_report_slope_and_verdict():
    """The SDE slope is `fit_slope` of the SDE times (a known slope is recovered), with no
    fitted constant; the verdict compares each SDE mean with the measured 95% interval of the
    mean and the SDE slope with the measured slope's interval."""
    rng = np.random.default_rng(1)
    x = np.log(DIMS)
    b = 0.7
    measured = 1.0 + b * x[:, None] + 0.3 * rng.standard_normal((3, 40))
    sde = 1.0 + b * x[:, None] + 0.3 * rng.standard_normal((3, 200))
    sde[-1, :5] = np.nan                                     # censored paths
    ext_dims = [10_000, 1_000_000]
    ext = 1.0 + b * np.log(ext_dims)[:, None] + 0.3 * rng.standard_normal((2, 200))
    ext[1, :50] = np.nan
    rep = sde_report(DIMS, measured, sde, extrapolate=ext_dims, sde_extrapolate=ext)
    fit = fit_slope(DIMS, sde)
    assert rep["slope_sde"] == fit["slope"] and rep["slope_sde_ci"] == fit["ci"]
    assert abs(rep["slope_sde"] - b) < 5 * fit["stderr"]
    assert rep["slope_sde_reason"] is None
    assert len(rep["escape_sde_mean"]) == 3 and len(rep["escape_sde_quantiles"]) == 3
    assert all(set(q) == {"0.1", "0.5", "0.9"} for q in rep["escape_sde_quantiles"])
    assert rep["escape_sde_mean"][2] == pytest.approx(np.nanmean(sde[2]))
    assert rep["escape_sde_censored"] == [0, 0, 5]
    assert rep["escape_sde_escaped_fraction"][2] == pytest.approx(195 / 200)
    assert [e["dim"] for e in rep["extrapolation"]] == ext_dims
    assert rep["extrapolation"][1]["censored"] == 50
    assert rep["extrapolation"][1]["escaped_fraction"] == pytest.approx(0.75)
    assert rep["extrapolation"][1]["mean"] == pytest.approx(np.nanmean(ext[1]))
    all_fit = fit_slope(DIMS + ext_dims, np.concatenate([sde, ext]))
    assert rep["slope_sde_all"] == pytest.approx(all_fit["slope"])
    # agreement, by hand
    for i in range(3):
        lo, hi = escape_stats(measured[i])["ci"]
        assert rep["agrees_sde_mean"][i] == (lo <= np.nanmean(sde[i]) <= hi)
    mlo, mhi = fit_slope(DIMS, measured)["ci"]
    assert rep["agrees_sde_slope"] == (mlo <= rep["slope_sde"] <= mhi)
    # a shifted SDE is outside at every D, its slope unchanged and still inside
    shifted = sde_report(DIMS, measured, sde + 1.0)
    assert shifted["agrees_sde_mean"] == [False] * 3 and shifted["agrees_sde"] is False
    assert shifted["slope_sde"] == pytest.approx(rep["slope_sde"])
    assert shifted["extrapolation"] == [] and shifted["slope_sde_all"] is None
    # a steeper SDE slope is outside the measured interval
    steep = sde_report(DIMS, measured, sde + 2.0 * (x - x.mean())[:, None])
    assert steep["agrees_sde_slope"] is False
    json.loads(dumps(rep))                                  # strict JSON


def test_sde_report_when_too_few_paths_escape():
    """With SDE escapes at one D only there is no slope: None, a reason, no verdict."""
    measured = np.array([[2.0, 2.2, 2.4], [3.0, 3.1, 3.3]])
    sde = np.array([[2.1, 2.3], [np.nan, np.nan]])
    rep = sde_report([250, 500], measured, sde)
    assert rep["slope_sde"] is None and "escaped" in rep["slope_sde_reason"]
    assert rep["agrees_sde_slope"] is None and rep["agrees_sde"] is None
    assert rep["agrees_sde_mean"] == [True, None]
    assert rep["escape_sde_mean"] == [pytest.approx(2.2), None]


def _report(sde: bool) -> dict:
    """A synthetic escape report (what `escape_study` returns) for the text summary."""
    dims = [250, 500]
    measured = np.array([[2.0, 2.2, 2.4, np.nan], [3.0, 3.1, 3.3, 3.2]])
    rep = {"slope_ci": [0.5, 2.5], "lambda": 0.4, "slope_measured": 1.5, "offset": 0.3,
           "slope_predicted": 1.2, "dims": dims, "seeds": 4, "t_max": 10.0,
           "escape_mean": [2.2, 3.15], "escape_ci": [escape_stats(r)["ci"] for r in measured],
           "censored": [1, 0], "agrees": True, "agrees_reason": None, "sde": sde}
    if sde:
        sde_t = np.array([[2.1, 2.3, 2.2], [3.1, np.nan, 3.2]])
        ext = np.array([[5.0, np.nan, np.nan]])
        rep.update(sde_report(dims, measured, sde_t, extrapolate=[10_000],
                              sde_extrapolate=ext))
        rep["extrapolation"][0].update(calibrated=None, paths_invalid=1)
        rep.update(paths_sde=3, sde_paths_invalid=[0, 0])
    return rep


def test_summary_lines():
    """The text report names the calibrated prediction, gives the SDE statistics and the
    verdict, and warns about censored and invalid SDE paths; without the SDE none of it."""
    text = "\n".join(summary_lines(_report(True)))
    assert "SDE (parameter-free)" in text and "calibrated" in text
    assert "D = 10000: SDE mean 5.000" in text and "escaped 0.33" in text and ">t_max" in text
    assert "verdict: SDE mean inside the measured 95% interval of the mean at" in text
    assert "warning: SDE paths had not escaped by t_max = 10 (1 of 3 at D = 500, 2 of 3 at " \
        "D = 10000)" in text
    assert "warning: SDE paths left the PSD domain (1 at D = 10000)" in text
    assert "warning: some SGD runs had not escaped" in text
    plain = "\n".join(summary_lines(_report(False)))
    assert "SDE" not in plain and "calibrated" in plain


def test_extrapolate_list():
    assert extrapolate_list("") == []
    assert extrapolate_list("100000, 10000") == [10_000, 100_000]
    for text in ("100000, 10000,10000", "10000,,100000", ","):   # a repeated or empty item
        with pytest.raises(argparse.ArgumentTypeError):
            extrapolate_list(text)


@pytest.mark.parametrize("extra", [["--paths", "0"], ["--paths", "-3"],
                                   ["--extrapolate", "10000,x"], ["--extrapolate", "1"],
                                   ["--extrapolate", "0,10000"],
                                   ["--set", "training.t_max=1", "--set", "sde.dt=2"],
                                   ["--set", "sde.paths=0"]])
def test_escape_sde_bad_input(tmp_path, capsys, extra):
    out = tmp_path / "e"
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(["escape", "--dims", "100,200", *extra, "--out", str(out)]))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error" in err[0], err
    assert not out.exists()
