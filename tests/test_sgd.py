"""Online SGD at finite D (`docs/model.md#training-online-sgd`, `sims`): determinism, segment
independence, learning,
frozen values, weights built from overlaps, divergence, batches, dtypes, multi-device runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from _util import FAST_COMPILE_ENV, Z, make_model

from headflow import sims
from headflow.dynamics import (DivergenceError, Overlaps, StepSizes, bayes_construction,
                               load_config, make_teacher, weights_from_overlaps)
from headflow.dynamics.priors import Discrete

REPO = Path(__file__).resolve().parents[1]

TINY = ["sim.dim=100", "sim.seeds=2", "training.t_max=2", "output.n_save=9",
        "sim.risk_samples=256"]


def _cfg(*extra):
    return load_config(None, TINY + list(extra))


def _arrays(res):
    return res.arrays()


@pytest.fixture(scope="module")
def tiny_run():
    return _arrays(sims.run_sgd(_cfg()))


def test_run_sgd_shapes(tiny_run):
    a = tiny_run
    S, T, H, F = 2, 9, 2, 1
    assert a["t"].shape == (T,) and a["steps"].shape == (T,)
    np.testing.assert_allclose(a["t"], np.linspace(0, 2, T), atol=1 / 100)
    np.testing.assert_array_equal(a["t"], a["steps"] / 100)
    assert a["risk"].shape == a["risk_err"].shape == (S, T)
    assert a["m"].shape == (S, T, H, F) and a["vks"].shape == (S, T, H, F)
    for k in ("q", "s", "kv"):
        assert a[k].shape == (S, T, H, H)
    for k in ("n", "b", "kvs"):
        assert a[k].shape == (S, T, H)
    assert all(np.all(np.isfinite(v)) for v in a.values())
    np.testing.assert_array_equal(a["seeds"], [0, 1])


def test_initial_state(tiny_run):
    """At t = 0: `q_hh ≈ σ_k²`, `s_hh ≈ σ_v²` (relative spread √(2/D)), teacher overlaps
    `O(σ/√D)`, biases `b_0`, and the recorded risk is that of an almost-zero predictor."""
    a, D = tiny_run, 100
    diag = lambda x: np.diagonal(x[:, 0], axis1=-2, axis2=-1)  # noqa: E731
    assert np.all(np.abs(diag(a["q"]) / 0.01 - 1) < Z * np.sqrt(2 / D))
    assert np.all(np.abs(diag(a["s"]) / 0.01 - 1) < Z * np.sqrt(2 / D))
    assert np.all(np.abs(a["m"][:, 0]) < Z * 0.1 / np.sqrt(D))
    assert np.all(np.abs(a["n"][:, 0]) < Z * 0.1 / np.sqrt(D))
    np.testing.assert_array_equal(a["b"][:, 0], 0.0)
    # R = Δ² + ρ* − 2 n·a + Σ s C ≈ 1 within O(0.1/√D + 0.01)
    assert np.all(np.abs(a["risk"][:, 0] - 1.0) < 0.05)


def test_same_seed_bit_identical(tiny_run):
    again = _arrays(sims.run_sgd(_cfg()))
    assert again.keys() == tiny_run.keys()
    for k in tiny_run:
        np.testing.assert_array_equal(again[k], tiny_run[k], err_msg=k)


def test_different_seeds_differ(tiny_run):
    other = _arrays(sims.run_sgd(_cfg("sim.seed=5")))
    np.testing.assert_array_equal(other["seeds"], [5, 6])
    for k in ("m", "q", "n", "s", "risk"):
        assert not np.allclose(other[k][:, 1:], tiny_run[k][:, 1:]), k
    # and the seeds within one run differ
    assert not np.allclose(tiny_run["q"][0], tiny_run["q"][1])


def test_independent_of_segmenting():
    cfg = _cfg()
    model = cfg.build_model()
    hp = StepSizes.from_config(cfg.training)
    runs = [sims.attention.simulate(model, hp, dim=100, seeds=[0, 1], times=cfg.save_times(),
                          segments=seg) for seg in (1, 7, 20)]
    for run in runs[1:]:
        for leaf_a, leaf_b in zip(jax.tree.leaves(run), jax.tree.leaves(runs[0])):
            np.testing.assert_array_equal(leaf_a, leaf_b)


def test_save_steps():
    """Save times become step counts `round(t·D)`, never decreasing, and `t = steps/D`."""
    model, hp = _cfg().build_model(), StepSizes.from_config(_cfg().training)
    run = sims.attention.simulate(model, hp, dim=1000, seeds=[0], times=[0.0, 0.0004, 0.0005,
        0.0005,
                                                              0.001])
    np.testing.assert_array_equal(np.asarray(run.steps), [0, 0, 0, 0, 1])
    np.testing.assert_allclose(np.asarray(run.t), np.asarray(run.steps) / 1000)
    run = sims.attention.simulate(model, hp, dim=100, seeds=[0], times=np.geomspace(1e-4, 0.02, 30))
    assert np.all(np.diff(np.asarray(run.steps)) >= 0)


def test_sgd_learns():
    """Bayes-softmax heads on the default flipped spike, D = 300, t = 10: the risk falls far
    beyond its error bars."""
    cfg = load_config(None, ["sim.dim=300", "sim.seeds=2", "training.t_max=10",
                             "output.n_save=3", "sim.risk_samples=2048"])
    res = sims.run_sgd(cfg)
    risk, err = np.asarray(res.risk), np.asarray(res.risk_err)
    drop = risk[:, 0] - risk[:, -1]
    assert np.all(drop > 20 * np.hypot(err[:, 0], err[:, -1])), (risk, err)
    assert np.all(risk[:, -1] < 0.85 * risk[:, 0])
    # the heads align with the signal direction
    assert np.all(np.abs(np.asarray(res.overlaps.m)[:, -1]).max(axis=(-1, -2)) > 0.3)


def test_frozen_values():
    cfg = _cfg("model.train_values=false", "model.rho=2.0")
    a = _arrays(sims.run_sgd(cfg))
    S, T, H = a["n"].shape
    np.testing.assert_allclose(a["n"], 2.0, rtol=1e-5)
    np.testing.assert_allclose(a["s"], np.full((S, T, H, H), 2.0), rtol=1e-5)
    np.testing.assert_allclose(a["vks"], 0.0, atol=1e-5)
    # the keys still learn
    assert np.all(np.abs(a["q"][:, -1] - a["q"][:, 0]).max(axis=(-1, -2)) > 1e-3)


def _valid_overlaps(kind: str, rho: float = 1.3) -> tuple[Overlaps, float]:
    rng = np.random.default_rng(3)
    if kind == "manifold":
        m = rng.standard_normal((2, 1))
        q = m @ m.T + np.array([[0.5, 0.1], [0.1, 0.3]])
        n = np.array([0.4, -0.2])
        s = np.outer(n, n) / rho + np.array([[0.2, 0.05], [0.05, 0.4]])
        return Overlaps.manifold(m, q, n, s, rng.standard_normal(2)), rho
    if kind == "bayes":
        model = make_model(L=3, H=3, prior=Discrete([[1.5], [-1.0], [0.3]], [0.3, 0.5, 0.2]),
                           rho=rho)
        return bayes_construction(model)[0], rho
    # off the manifold: the overlaps of some other weights
    teacher = make_teacher(jr.key(1), 30, 1, rho, dtype=jnp.float64)
    from _util import correlated_weights
    return correlated_weights(jr.key(2), teacher, 2).overlaps(teacher), rho


@pytest.mark.parametrize("kind", ["manifold", "bayes", "off_manifold"])
@pytest.mark.parametrize("D", [20, 500])
def test_weights_from_overlaps(kind, D):
    ov, rho = _valid_overlaps(kind)
    teacher = make_teacher(jr.key(7), D, ov.F, rho, dtype=jnp.float64)
    w = weights_from_overlaps(jr.key(8), ov, teacher, rho, dtype=jnp.float64)
    assert w.K.shape == (ov.H, D) and w.V.shape == (ov.H, D)
    got = w.overlaps(teacher)
    for name in ("m", "q", "n", "s", "b", "kv", "kvs", "vks"):
        np.testing.assert_allclose(getattr(got, name), getattr(ov, name), atol=1e-10,
                                   err_msg=name)


def test_simulate_from_overlaps():
    """`init=` a callable building weights with given overlaps: the recorded t = 0 overlaps are
    those (to float32 round-off)."""
    ov, rho = _valid_overlaps("manifold", rho=1.0)
    cfg = _cfg()                        # the tiny run's configuration: its compiled step is reused
    model, hp = cfg.build_model(), StepSizes.from_config(cfg.training)
    rec = sims.attention.simulate(model, hp, dim=100, seeds=[0, 1], times=cfg.save_times(),
                        init=lambda k, t: weights_from_overlaps(k, ov, t, rho)).overlaps
    for name in ("m", "q", "n", "s", "b", "kv", "kvs", "vks"):
        got = np.asarray(getattr(rec, name))[:, 0]
        np.testing.assert_allclose(got, np.broadcast_to(getattr(ov, name), got.shape),
                                   atol=2e-6, err_msg=name)


def test_divergence_raises():
    cfg = _cfg("training.lr=1e6")
    with pytest.raises(DivergenceError, match=r"training\.lr \(now 1e\+06\)") as info:
        sims.run_sgd(cfg)
    assert "\n" not in str(info.value)


def test_batch_and_float64():
    """Mini-batches and float64 work. (float32 and float64 draw different random numbers, so
    their trajectories agree only statistically.)"""
    cfg = _cfg("training.batch=4")
    model, hp = cfg.build_model(), StepSizes.from_config(cfg.training)
    assert hp.batch == 4
    run = sims.attention.simulate(model, hp, dim=100, seeds=[0, 1], times=cfg.save_times(),
                        dtype=jnp.float64)
    ov, teachers, w = run.overlaps, run.teachers, run.weights
    assert w.K.dtype == w.V.dtype == w.b.dtype == teachers.vstar.dtype == jnp.float64
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(ov))
    assert ov.q.dtype == jnp.float64
    risk, err = sims.attention.recorded_risk(model, ov, samples=256)
    assert np.all(np.asarray(risk[:, -1]) < np.asarray(risk[:, 0]))


# -- several devices ---------------------------------------------------------------------------

_SHARDED = textwrap.dedent("""
    import json, sys
    import numpy as np
    import jax, jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    from headflow import dynamics, sims
    from headflow.dynamics.sharding import shard_leading
    assert jax.device_count() == 2, jax.devices()
    x = shard_leading(jnp.zeros((2, 3)))
    assert len(x.sharding.device_set) == 2, x.sharding
    cfg = dynamics.load_config(None, json.loads(sys.argv[1]))
    np.savez(sys.argv[2], **sims.run_sgd(cfg).arrays())
""")


@pytest.mark.slow
def test_sharded_run_matches_single_device(tmp_path, tiny_run):
    """In a subprocess with two (forced) CPU devices, the seeds are sharded over them; the
    arrays equal the one-device run to float32 round-off."""
    assert jax.device_count() == 1
    env = dict(os.environ, **FAST_COMPILE_ENV,
               XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    out = tmp_path / "sharded.npz"
    proc = subprocess.run([sys.executable, "-c", _SHARDED, json.dumps(TINY), str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sharded = dict(np.load(out))
    assert sharded.keys() == tiny_run.keys()
    for k in tiny_run:
        np.testing.assert_allclose(sharded[k], tiny_run[k], rtol=1e-5, atol=1e-6, err_msg=k)
