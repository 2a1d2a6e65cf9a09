"""Phase and stage detection (validation/phases.py) on synthetic trajectories with known switch
times, with and without SGD-like noise; the staged, ordered specialization on a 3-feature
anisotropic prior (ODE); and the `headflow phases` command."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from headflow.dynamics.measures import crossing_shortfall, persistent_crossing
from headflow.dynamics.ode import NodeChange
from headflow.validation.experiments.convergence import NOT_REPRODUCED, NOT_RESOLVED, REPRODUCED
from headflow.validation.experiments.phases import detect_phases, seed_summary, stage_order_verdict

THETA = 0.2


def _ramp(t, center, width, height):
    """A smooth switch from 0 to `height` centred at `center`."""
    return height * 0.5 * (1.0 + np.tanh((t - center) / width))


def _crossing(center, width, height, level):
    """Exact time at which `_ramp` reaches `level`."""
    return center + width * np.arctanh(2.0 * level / height - 1.0)


# Four heads, three features. Plateau: every head aligns with feature 1 (the mean direction).
# Stage A: heads {1,2} vs {3,4} split along feature 2 (±0.3 each, gap 0.6);
# stage B: head 1 vs head 2 along feature 3 (±0.25, gap 0.5);
# stage C: head 4 reverses its alignment with feature 1 (+0.8 → −0.6, an excursion).
CENTERS = {"A": 12.0, "B": 22.0, "C": 32.0}
WIDTH = 1.5


def synthetic(t, noise=0.0, seed=0):
    T = len(t)
    a = np.zeros((T, 4, 3))
    base = 0.8 * (1.0 - np.exp(-t / 2.0))
    a[:, :, 0] = base[:, None]
    split2 = _ramp(t, CENTERS["A"], WIDTH, 0.3)
    a[:, 0, 1] = a[:, 1, 1] = split2
    a[:, 2, 1] = a[:, 3, 1] = -split2
    split3 = _ramp(t, CENTERS["B"], WIDTH, 0.25)
    a[:, 0, 2], a[:, 1, 2] = split3, -split3
    a[:, 3, 0] = base - _ramp(t, CENTERS["C"], WIDTH, 1.4)
    rng = np.random.default_rng(seed)
    a = a + noise * rng.standard_normal(a.shape)
    qd = 1.0 + 0.5 * t / t[-1]                              # norms drift: α = m/√q still exact
    m = a * np.sqrt(qd)[:, None, None]
    q = np.broadcast_to(0.3 * np.ones((4, 4)), (T, 4, 4)).copy()
    q[:, np.arange(4), np.arange(4)] = qd[:, None]
    return m, q


def expected():
    return {"A": _crossing(CENTERS["A"], WIDTH, 0.6, THETA),
            "B": _crossing(CENTERS["B"], WIDTH, 0.5, THETA),
            # heads 3 and 4 part along feature 1 when their α_1 gap reaches θ
            "C": _crossing(CENTERS["C"], WIDTH, 1.4, THETA)}


@pytest.mark.parametrize("n_save", [401, 1601])
def test_detects_plateau_and_stages_exactly(n_save):
    t = np.linspace(0.0, 45.0, n_save)
    m, q = synthetic(t)
    ph = detect_phases(t, m, q, threshold=THETA)
    exp = expected()
    dt = t[1] - t[0]
    assert [s.feature for s in ph.stages] == [1, 2, 0]
    for s, key in zip(ph.stages, "ABC"):   # linear interpolation of a tanh: error O(dt²)
        assert abs(s.time - exp[key]) < 2 * dt**2 + 1e-9, (key, s.time, exp[key])
    assert ph.plateau_exit == ph.stages[0].time
    # heads (0-based) on each side of each split
    assert ph.stages[0].plus == (0, 1) and ph.stages[0].minus == (2, 3)
    assert ph.stages[1].plus == (0,) and ph.stages[1].minus == (1,)
    assert ph.stages[2].plus == (2,) and ph.stages[2].minus == (3,)
    # plateau entry: a(t) = 0.8(1 − e^{−t/2}) reaches 90% of its value at the exit
    a_exit = 0.8 * (1 - np.exp(-exp["A"] / 2))
    t_entry = -2.0 * np.log(1 - 0.9 * a_exit / 0.8)
    assert abs(ph.plateau_entry - t_entry) <= dt + 1e-12
    # the excursion: head 4 reverses its feature-1 alignment, zero crossing at the ramp's
    # half-way point 0.8 − 1.4·r = 0 (stage C under way)
    (exc,) = ph.excursions
    assert (exc.head, exc.feature, exc.from_sign, exc.stage) == (3, 0, 1, 2)
    r = 0.8 * (1 - np.exp(-CENTERS["C"] / 2)) / 1.4
    assert abs(exc.t_cross - _crossing(CENTERS["C"], WIDTH, 1.4, 1.4 * r)) < 2 * dt
    assert ph.stage_order == [1, 2, 0]
    # feature times: the spread along f2, f3, f1 crosses θ at the three switches
    assert ph.feature_order == [1, 2, 0]
    for f, key in zip((1, 2, 0), "ABC"):
        assert abs(ph.feature_times[f] - exp[key]) < 2 * dt**2 + 1e-9
    assert [d["feature"] for d in ph.assignment()] == [1, 1, 1, 1]


@pytest.mark.parametrize("seed", range(5))
def test_detection_is_robust_to_sgd_noise(seed):
    """Noise of the size of D = 250 fluctuations (sd 0.05 per alignment) moves no stage by
    more than the time the ramp takes to grow by a few noise sd, and invents none."""
    t = np.linspace(0.0, 45.0, 226)
    m, q = synthetic(t, noise=0.05, seed=seed)
    ph = detect_phases(t, m, q, threshold=THETA)
    exp = expected()
    assert [s.feature for s in ph.stages] == [1, 2, 0]
    for s, key in zip(ph.stages, "ABC"):
        assert abs(s.time - exp[key]) < 2.5, (key, s.time, exp[key])
    assert len(ph.excursions) == 1


def test_persistent_crossing_ignores_blips():
    t = np.arange(10.0)
    x = np.array([0.0, 0.25, 0.05, 0.1, 0.15, 0.3, 0.5, 0.15, 0.6, 0.9])
    # the blip at t=1 returns below θ/2 = 0.1 (t=2): it does not count; the dip at t=7 (0.15)
    # stays above θ/2, so the crossing between t=4 and t=5 stands
    assert persistent_crossing(t, x, 0.2) == pytest.approx(4 + (0.2 - 0.15) / 0.15)
    assert persistent_crossing(t, 0.1 * np.ones(10), 0.2) is None
    assert persistent_crossing(t, np.ones(10), 0.2) == 0.0


def test_crossing_shortfall_is_the_distance_to_a_persistent_crossing():
    x = np.array([0.0, 0.05, 0.15, 0.12])
    assert crossing_shortfall(x, 0.2) == pytest.approx(0.05)    # tail after t=1: max 0.15
    assert crossing_shortfall(np.array([0.3, 0.05]), 0.2) == pytest.approx(0.15)  # ends low
    assert crossing_shortfall(np.array([0.0, 0.1, 0.25]), 0.2) == 0.0
    # a curve crosses persistently exactly when its shortfall is zero
    rng = np.random.default_rng(0)
    t = np.arange(30.0)
    for _ in range(200):
        x = np.cumsum(rng.normal(0.0, 0.05, 30)) + rng.uniform(0.0, 0.2)
        assert (persistent_crossing(t, x, 0.2) is None) == (crossing_shortfall(x, 0.2) > 0)


def _phases(times, shortfalls):
    return dataclasses.replace(detect_phases(np.linspace(0.0, 1.0, 11), *synthetic(
        np.linspace(0.0, 1.0, 11))), feature_times=tuple(times),
        feature_shortfalls=tuple(shortfalls))


def test_stage_order_verdict_on_a_feature_never_told_apart():
    # features 2 and 3 never told apart by t = 90 on either node count: the claim 1-2-3 fails,
    # judged on how far feature 3's spread stays below θ against its change on 4x the nodes
    ph, fine = _phases((17.6, None, None), (0.0, 0.12, 0.18)), \
        _phases((18.5, None, None), (0.0, 0.11, 0.17))
    times = NodeChange(quantity="feature times", samples=2048, samples_fine=8192, t_from=0.0,
                       t_to=90.0, value=[17.6, 90.0, 90.0], value_fine=[18.5, 90.0, 90.0])
    v = stage_order_verdict(ph, [0, 1, 2], 90.0, times, fine)
    assert v.margin == pytest.approx(0.18) and v.change == pytest.approx(0.01)
    assert v.word == NOT_REPRODUCED and v.numbers["shortfall_feature"] == 3
    # feature 3 told apart on 4x the nodes: the whole shortfall is the change
    told = _phases((18.5, None, 80.0), (0.0, 0.11, 0.0))
    assert stage_order_verdict(ph, [0, 1, 2], 90.0, times, told).word == NOT_RESOLVED
    # every feature told apart in order: the smallest time gap against the times' change
    ph3 = _phases((10.0, 20.0, 40.0), (0.0, 0.0, 0.0))
    moved = NodeChange(quantity="feature times", samples=2048, samples_fine=8192, t_from=0.0,
                       t_to=90.0, value=[10.0, 20.0, 40.0], value_fine=[10.5, 21.0, 41.0])
    v = stage_order_verdict(ph3, [0, 1, 2], 90.0, moved, ph3)
    assert v.margin == pytest.approx(10.0) and v.word == REPRODUCED


def test_no_escape_and_seed_summary():
    t = np.linspace(0.0, 10.0, 51)
    m, q = synthetic(t)                                      # ends before stage A
    ph = detect_phases(t, m, q)
    assert ph.plateau_exit is None and ph.stages == () and ph.stage_order == []
    t2 = np.linspace(0.0, 45.0, 401)
    phs = [detect_phases(t2, *synthetic(t2, 0.03, s)) for s in range(3)] + [ph]
    summ = seed_summary(phs)
    assert summ["seeds"] == 4 and summ["escaped"] == 3
    assert summ["stage_orders"] == {"2-3-1": 3, "none": 1}
    assert summ["stage_order"] == "2-3-1"
    assert summ["feature_orders"] == {"2-3-1": 3, "none": 1}
    assert summ["feature_times_mean"][1] == pytest.approx(expected()["A"], abs=1.0)
    json.dumps(summ)
    json.dumps(ph.to_dict())


# -- sweep and phase diagram ----------------------------------------------------------------------

SWEEP_SETS = ['model.activation="softmax1"', "model.L=3", "ode.samples=256",
              'ode.expectation="qmc"', "training.t_max=8.0", "output.n_save=17", "sim.dim=200"]


@pytest.mark.slow
def test_vectorized_sweep_equals_individual_runs_and_classifies():
    """One vmapped solve over the grid gives, point by point, the trajectories of separate
    `run_ode` calls (same nodes, same start); a huge learning rate is stopped and classified as
    diverging, a zero signal as no learning."""
    from headflow.dynamics import load_config
    from headflow.dynamics.ode import run_ode
    from headflow.validation.experiments.phase_diagram import DIVERGING, NO_LEARNING, classify
    from headflow.validation.experiments.sweep import run_sweep

    cfg = load_config(None, SWEEP_SETS)
    axes = [("training.lr", [0.5, 1.0, 60.0]), ("prior.amplitude", [0.0, 3.0])]
    res = run_sweep(cfg, axes)
    classes, escape = classify(res)
    assert res.shape == (3, 2) and len(res.overrides) == 6
    for i, p in enumerate(res.overrides):
        if p["training.lr"] > 10:
            assert res.status[i] == 1 and classes[i] == DIVERGING
            continue
        assert res.status[i] == 0
        one = run_ode(cfg.replace(**p)).arrays()
        for name in ("m", "q", "n", "s", "b"):
            np.testing.assert_allclose(res.arrays[name][i], one[name], rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(res.risk[i], one["risk"], rtol=1e-6)
        if p["prior.amplitude"] == 0.0:
            assert classes[i] == NO_LEARNING and np.isnan(escape[i])


def test_sweep_command_rejects_bad_grid(tmp_path, capsys):
    from headflow.validation.cli import main

    out = tmp_path / "s"
    for argv in (["sweep", "--out", str(out)],
                 ["sweep", "--grid", "training.nope=1,2", "--out", str(out)],
                 ["sweep", "--grid", "training.lr=-1,2", "--out", str(out)],
                 ["sweep", "--grid", "training.lr", "--out", str(out)],
                 ["sweep", "--grid", "training.lr=1,2", "--grid", "training.lr=3",
                  "--out", str(out)]):
        with pytest.raises(SystemExit) as exc:
            raise SystemExit(main(argv))
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "error" in err[0], err
        assert not out.exists()


@pytest.mark.slow
def test_sweep_and_phases_commands(tmp_path, capsys):
    from headflow.validation.cli import main

    out = tmp_path / "sw"
    sets = sum((["--set", s] for s in SWEEP_SETS), [])
    # the grid of the vectorized test above, whose compiled solves the command then reuses
    assert main(["sweep", *sets, "--grid", "training.lr=0.5,1.0,60.0", "--grid",
                 "prior.amplitude=0.0,3.0", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["shape"] == [3, 2] and len(summary["phase"]) == 6
    for name in ("sweep.npz", "sweep.json", "sweep.png", "phase_diagram.png", "config.toml",
                 "meta.json"):
        assert (out / name).exists()
    out2 = tmp_path / "ph"
    assert main(["phases", *sets, "--set", "model.activation=\"bayes_softmax\"",
                 "--set", "training.t_max=20.0", "--set", "output.n_save=41", "--set",
                 "sim.dim=300", "--seeds", "2", "--out", str(out2), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"ode", "sgd", "stage_order_ode", "out"} <= set(summary)
    for name in ("phases.json", "phases_ode.png", "phases_sgd.png", "sgd.npz", "ode.npz"):
        assert (out2 / name).exists()
    full = json.loads((out2 / "phases.json").read_text())
    assert len(full["sgd"]["per_seed"]) == 2


@pytest.mark.slow
def test_staged_specialization_follows_the_variances():
    """Spec §8.2 on the 3-feature prior θ ~ N(0, diag(2, 1, 0.5)·9) (validation/configs/
    staged.toml, ODE from a random start at D = 1000): the heads tell the features apart in the
    order of Var θ_f — the first stage splits along feature 1, the next feature to split is
    feature 2, and feature 3 (if told apart at all by then) comes after both."""
    import tomllib
    from importlib import resources

    from headflow.dynamics import Config
    from headflow.validation.experiments.phases import ode_trajectory

    text = resources.files("headflow.validation").joinpath("configs/staged.toml").read_text()
    cfg = Config.from_dict(tomllib.loads(text)).replace(
        **{"ode.samples": 1024, "training.t_max": 60.0, "output.n_save": 121})
    ode = ode_trajectory(cfg, None, cfg.save_times(), equivariant=True)
    ph = detect_phases(ode["t"], ode["m"], ode["q"])
    assert ph.stages and ph.stages[0].feature == 0
    assert ph.stage_order[:2] == [0, 1], ph.to_dict()
    t1, t2, t3 = ph.feature_times
    assert t1 is not None and t2 is not None and t1 < t2
    assert t3 is None or t3 > t2
    # the risk falls at each of the first two stages
    r = np.interp([ph.stages[0].time - 2, ph.stages[0].time + 8], ode["t"], ode["risk"])
    assert r[1] < r[0] - 0.05
