"""`headflow compare --theory {sde,ode,ode-per-seed}` and `headflow demo` with ensembles: the
report's keys and shapes, the verdicts on hand-built ensembles, never-escaped runs in the KS
test and the quantiles, `ode-per-seed` against `run_ode` from one seed's start, bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import headflow.dynamics as d
from _util import xla_optimizations
from headflow.dynamics.measures import escape_quantiles
from headflow.dynamics.ode import run_ode
from headflow.validation.cli import main
from headflow.validation.experiments.compare import (ESCAPE_TOLERANCE, MEAN_TOLERANCE,
                                                     agreement_report, agreement_verdicts,
                                                     ensemble_moments, escape_array)
from headflow.validation.verdicts import ks_distance

ROOT = Path(__file__).resolve().parents[1]
SETS = ["--set", "model.L=3", "--set", "sim.dim=60", "--set", "sim.seeds=3", "--set",
        "training.t_max=1", "--set", "output.n_save=3", "--set", "ode.samples=256", "--set",
        "sde.dt=0.5", "--set", "sde.samples_drift=128", "--set", "sde.samples_noise=64",
        "--set", "sim.risk_samples=256", "--set", "sde.paths=4", "--set", "ode.rhs=autodiff"]
"""Tiny runs of the demo's experiment; compare and demo share their compiled programs."""
TINY = [str(ROOT / "validation" / "configs" / "demo.toml"), *SETS]
TOP = ("dim", "seeds", "t_max", "risk_sup_abs", "risk_sup_rel", "risk_spread", "risk_mc_err",
       "cross_sup_sgd", "pre_escape", "final", "escape")


@pytest.fixture(autouse=True, scope="module")
def _compile_fast():
    with xla_optimizations(False):      # tiny programs: compiling dominates
        yield


def _strict(text: str):
    def bad(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=bad)


def _run(capsys, argv: list[str]) -> dict:
    assert main([*argv, "--json"]) == 0
    return _strict(capsys.readouterr().out.strip().splitlines()[-1])


# -- the command, each theory -----------------------------------------------------------------

# numpy's RuntimeWarnings are errors here: an infinite discrepancy in some bootstrap resamples
# (runs without spread at t = 0) once reached np.std
@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("theory,paths,theory_file", [("sde", 4, "sde.npz"),
                                                      ("ode-per-seed", None, "ode_per_seed.npz")])
def test_compare_ensembles(tmp_path, capsys, theory, paths, theory_file):
    out = tmp_path / "run"
    # sde is the default theory
    extra = ["--paths", str(paths)] if theory == "sde" else ["--theory", theory]
    rep = _run(capsys, ["compare", *TINY, *extra, "--out", str(out)])
    n = paths or 3
    assert rep["theory"] == theory and rep["paths"] == n and rep["seeds"] == 3
    for key in TOP + ("verdicts", "ensemble"):
        assert key in rep, key
    assert set(rep["verdicts"]) == {"mean", "std", "escape", "all"}
    # 3 SGD seeds against 3 or 4 theory runs: the risks' mean and spread cannot be resolved at
    # this size, and the rule must not claim them. The escape times: where no run escapes by
    # t = 1 on either side, the two samples are equal (all censored) and agree exactly;
    # otherwise they are not resolved either
    none = rep["escape"]["sgd_escaped"] == rep["escape"]["theory_escaped"] == 0
    expected = {"mean": "not resolved", "std": "not resolved",
                "escape": "agree" if none else "not resolved"}
    for v, word in expected.items():
        assert rep["verdicts"][v]["word"] == word, (v, rep["escape"], rep["verdicts"][v])
        assert rep["verdicts"][v]["sizes"] == [3, n]
    assert (rep["verdicts"]["escape"]["statistic"] == 0.0) == none
    assert rep["verdicts"]["all"] == "not resolved"
    esc = rep["escape"]
    assert len(esc["sgd"]) == 3 and len(esc["theory"]) == n
    assert set(esc["sgd_quantiles"]) == set(esc["theory_quantiles"]) == {
        "0.1", "0.25", "0.5", "0.75", "0.9"}
    assert 0 <= esc["ks_distance"] <= 1 and "+inf" in esc["never_escaped"]
    assert set(rep["ensemble"]) == {"risk", "m", "q", "n", "s", "b"}
    assert np.shape(rep["ensemble"]["m"]["final_sgd"]["mean"]) == (2, 1)
    assert {"risk_theory", "risk_theory_sem", "risk_sgd", "risk_sgd_sem"} <= set(rep["final"])
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(["config.toml", "meta.json", "sgd.npz", theory_file, "ensemble.npz",
                            "report.json", "compare.png"])
    with np.load(out / theory_file) as z:
        T = len(z["t"])
        assert T == 3 and z["risk"].shape == (n, T) and z["m"].shape == (n, T, 2, 1)
        assert z["escape"].shape == (n,)
    with np.load(out / "ensemble.npz") as z, np.load(out / "sgd.npz") as s:
        for side in ("sgd", "theory"):
            for stat in ("mean", "mean_se", "std", "std_se"):
                assert z[f"{side}_{stat}_risk"].shape == (T,)
                assert z[f"{side}_{stat}_q"].shape == (T, 2, 2)
        np.testing.assert_allclose(z["sgd_mean_risk"], s["risk"].mean(axis=0))
        np.testing.assert_allclose(z["theory_mean_risk"][-1], rep["final"]["risk_theory"])
    assert _strict((out / "report.json").read_text())["verdicts"] == rep["verdicts"]
    if theory == "ode-per-seed":
        _check_per_seed_against_run_ode(out)


def test_compare_ode_keeps_its_report(tmp_path, capsys):
    rep = _run(capsys, ["compare", *TINY, "--theory", "ode", "--out", str(tmp_path / "o")])
    assert rep["theory"] == "ode"
    assert list(rep)[1:] == [*TOP[:7], *(f"{n}_{w}" for n in d.ORDER_PARAMETERS
                                         for w in ("sup_abs", "spread")), *TOP[7:], "ode_form",
                             "out"]
    assert set(rep["final"]) == {"t", "risk_ode", "risk_sgd", "risk_abs", "risk_rel",
                                 "risk_sgd_sem"}
    assert set(rep["escape"]) == {"sgd", "ode", "sgd_escaped"}
    assert "verdicts" not in rep
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == sorted(
        ["config.toml", "meta.json", "sgd.npz", "ode.npz", "report.json", "compare.png"])


def test_demo_summary_states_verdicts(tmp_path, capsys, monkeypatch):
    from headflow.validation.commands import demo

    # the Bayes risk (its own command's tests) would take most of this tiny run
    monkeypatch.setattr(demo, "bayes_summary", lambda cfg, samples: {"bayes_risk": 0.1})
    out = tmp_path / "demo"
    rep = _run(capsys, ["demo", *SETS, "--weight-seeds", "2", "--out", str(out)])
    assert rep["theory"] == "sde" and rep["paths"] == 4 and "verdicts" in rep
    md = (out / "summary.md").read_text()
    # each verdict, in one line of words with its numbers
    for what, key in (("mean risk", "mean"), ("spread of the risk", "std"),
                      ("escape times", "escape")):
        line = next(x for x in md.splitlines() if x.startswith(f"- {what}: "))
        assert line.startswith(f"- {what}: {rep['verdicts'][key]['phrase']}: ")
        assert "90% interval" in line and "tolerance" in line
    assert f"theory and simulation {rep['verdicts']['all']}" in md
    # the verdicts this tiny demo must reach (3 seeds against 4 paths, t <= 1): the mean and
    # the spread of the risk are not resolved, so neither is the headline
    assert rep["verdicts"]["mean"]["word"] == rep["verdicts"]["std"]["word"] == "not resolved"
    assert rep["verdicts"]["all"] == "not resolved"
    assert "theory and simulation not resolved" in md
    assert "D → ∞ ODE" in md and "weight-space SGD (2 seeds" in md
    assert rep["weight_space"]["seeds"] == 2 and len(rep["weight_space"]["escape"]) == 2
    assert np.isfinite(rep["limit"]["risk_final"])
    with np.load(out / "limit.npz") as z, np.load(out / "sgd_weights.npz") as w:
        assert z["risk"].shape == (3,) and w["risk"].shape == (2, 3)
    assert {"compare.png", "sde.npz", "ensemble.npz", "summary.md", "report.json"} <= {
        p.name for p in out.iterdir()}


# -- ode-per-seed against run_ode -------------------------------------------------------------

def _check_per_seed_against_run_ode(out: Path) -> None:
    """Each ODE of `ode_per_seed.npz` equals `run_ode` from that seed's initial overlaps in
    `sgd.npz`, to round-off."""
    cfg = d.load_config(ROOT / "validation" / "configs" / "demo.toml", SETS[1::2])
    with np.load(out / "sgd.npz") as z, np.load(out / "ode_per_seed.npz") as e:
        sgd, ens = dict(z), dict(e)
    for i in (0, 2):
        ov0 = d.Overlaps(**{k: jnp.asarray(sgd[k][i, 0], jnp.float64)
                            for k in d.ORDER_PARAMETERS + d.CROSS_OVERLAPS})
        one = run_ode(cfg, ov0, sgd["t"]).arrays()
        for name, a in one.items():
            if name != "t":
                np.testing.assert_allclose(ens[name][i], a, rtol=1e-9, atol=1e-12,
                                           err_msg=name)
    # the seeds start apart, so their ODEs differ
    assert not np.allclose(ens["q"][0], ens["q"][1])


# -- the verdicts on hand-built ensembles -----------------------------------------------------

def _ensemble(rng, n: int, T: int, shift: float = 0.0, scale: float = 1.0) -> np.ndarray:
    return 1.0 + shift + scale * 0.1 * rng.standard_normal((n, T))


def test_identical_ensembles_agree():
    rng = np.random.default_rng(0)
    t = np.linspace(0, 10, 11)
    risk = _ensemble(rng, 200, 11)
    esc = list(rng.uniform(2, 8, 200))
    v = agreement_verdicts(t, risk, risk.copy(), esc, list(esc))
    assert v["mean"]["statistic"] == 0 and v["std"]["ratio"] == 1
    assert v["escape"]["statistic"] == 0 and v["escape"]["p"] == 1
    assert [v[k]["word"] for k in ("mean", "std", "escape")] == ["agree"] * 3
    assert v["all"] == "agree"


def test_shifted_ensembles_disagree():
    rng = np.random.default_rng(1)
    t = np.linspace(0, 10, 11)
    a = _ensemble(rng, 40, 11)
    b = a + 0.2                              # the same runs shifted: the same spread exactly
    v = agreement_verdicts(t, a, b, list(rng.uniform(2, 4, 40)), list(rng.uniform(6, 8, 40)))
    assert v["mean"]["statistic"] > MEAN_TOLERANCE and v["mean"]["word"] == "disagree"
    assert v["std"]["statistic"] < 1e-12 and v["std"]["word"] != "disagree"
    assert v["escape"]["statistic"] == 1 and v["escape"]["word"] == "disagree"
    assert v["all"] == "disagree"
    # spread twice as large: the std verdict fails, the means (same) do not
    w = agreement_verdicts(t, a, 1.0 + 2 * (a - 1.0), [3.0] * 40, [3.0] * 40)
    assert w["mean"]["word"] != "disagree" and w["std"]["word"] == "disagree"
    assert w["escape"]["statistic"] == 0 and w["escape"]["word"] == "agree"
    assert abs(w["std"]["ratio"] - 2) < 1e-12 and w["all"] == "disagree"


def test_small_ensembles_are_not_resolved():
    """Four runs against three of one law: no verdict can be made; the report names the sizes
    that would make one."""
    rng = np.random.default_rng(5)
    t = np.linspace(0, 1, 3)
    v = agreement_verdicts(t, _ensemble(rng, 3, 3), _ensemble(rng, 4, 3),
                           list(rng.uniform(0, 1, 3)), list(rng.uniform(0, 1, 4)))
    assert v["mean"]["word"] == "not resolved" and v["mean"]["needs"][0] > 3
    assert "needs about" in v["mean"]["phrase"] and v["all"] == "not resolved"
    one = agreement_verdicts(t, np.ones((1, 3)), np.ones((4, 3)), [None], [None] * 4)
    assert one["mean"]["agree"] is None and one["std"]["agree"] is None
    assert one["mean"]["needs"] is None and one["all"] == "not resolved"


def test_unit_mean_deviation_is_free_of_the_ordering_bias():
    """On a plateau of two exchangeable heads, runs `m_ih = m* + ξ_ih` (ξ iid N(0, σ²), fixed
    in time) against the exact theory `m*`: in canonical order each run's first head is the
    larger of its two, so the per-head deviation of the seed mean is E max(ξ_1, ξ_2) = σ/√π
    whatever the number of runs; the unit mean's deviation is the seed mean's noise,
    σ/√(2S), and equals the direct computation to round-off."""
    rng = np.random.default_rng(3)
    S, T, H, sigma, m_star = 4000, 6, 2, 0.02, 0.3
    layout = d.Layout(names=("m", "q"), per_unit=("m",), unit_by_unit=("q",),
                      alignment=("m", "q"))
    xi = sigma * rng.standard_normal((S, 1, H, 1))
    sgd = {"t": np.linspace(0, 1, T), "risk": np.ones((S, T)), "risk_err": np.zeros((S, T)),
           "m": m_star + np.broadcast_to(xi, (S, T, H, 1)),
           "q": np.broadcast_to(np.eye(H), (S, T, H, H))}
    ode = {"t": sgd["t"], "risk": np.ones(T), "risk_err": np.zeros(T),
           "m": np.full((T, H, 1), m_star), "q": np.broadcast_to(np.eye(H), (T, H, H))}
    rep = agreement_report(sgd, ode, dim=1000, seeds=S, layout=layout)["pre_escape"]
    assert rep["t_end"] == 1.0                                  # no run escaped
    per_head, mean = rep["m_sup_abs"], rep["m_unit_mean_sup_abs"]
    assert abs(per_head - sigma / np.sqrt(np.pi)) < 5 * sigma / np.sqrt(S)
    assert mean == pytest.approx(abs(xi.mean()), rel=1e-9, abs=1e-15)
    assert mean < 5 * sigma / np.sqrt(H * S) and mean < 0.2 * per_head
    assert "q_unit_mean_sup_abs" not in rep                     # not a per-unit array


def test_moments_and_standard_errors():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4000, 2, 3))
    m = ensemble_moments(a)
    assert m["mean"].shape == (2, 3)
    np.testing.assert_allclose(m["std"], a.std(axis=0, ddof=1))
    np.testing.assert_allclose(m["mean_se"], m["std"] / np.sqrt(4000))
    # Gaussian data: the delta-method s.e. of the std is close to s/√(2(N−1))
    np.testing.assert_allclose(m["std_se"], m["std"] / np.sqrt(2 * 3999), rtol=0.15)


def test_never_escaped_runs_count_as_infinite():
    def ks(x, y):
        return float(ks_distance(escape_array(x)[None], escape_array(y)[None])[0])

    # no run escapes on either side: the same distribution
    assert ks([None] * 3, [np.nan] * 5) == 0.0
    # escaped fractions 1/4 and 4/4 at the same times: the KS distance is the gap in the
    # escaped fraction, 3/4 (never-escaped runs are neither dropped nor put at t_max)
    assert ks([1.0, None, None, None], [1.0, 1.0, 1.0, 1.0]) == pytest.approx(0.75)
    # dropping the never-escaped runs would make these two identical
    assert ks([2.0, 3.0, None, None], [2.0, 3.0]) == pytest.approx(0.5)
    assert ESCAPE_TOLERANCE < 0.5
    q = escape_quantiles([2.0, 3.0, None, None])
    assert q["0.25"] == 2.0 and q["0.5"] == 3.0 and q["0.75"] == np.inf


# -- bad inputs --------------------------------------------------------------------------------

@pytest.mark.parametrize("argv,needle", [
    (["compare", "--theory", "foo"], "--theory"),
    (["compare", "--paths", "0"], "--paths"),
    (["compare", "--paths", "-2"], "--paths"),
    (["compare", "--paths", "x"], "--paths"),
    (["compare", "--theory", "ode", "--paths", "3"], "--paths"),
])
def test_bad_inputs(tmp_path, capsys, argv, needle):
    out = tmp_path / "deep" / "out"
    try:
        code = main([*argv, *TINY, "--out", str(out)])
    except SystemExit as ex:
        code = ex.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error" in err[0] and needle in err[0], err
    assert not (tmp_path / "deep").exists()


def test_readme_and_docs_describe_theories():
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "--theory" in readme
    assert "## Comparing ensembles with SGD" in (ROOT / "docs" / "sde.md").read_text()
