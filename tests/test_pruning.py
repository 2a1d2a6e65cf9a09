"""Pruning heads without retraining (issue 7): the pruned predictor is the smaller model, heads
that contribute nothing can go at no cost, and the greedy criterion finds them."""

import dataclasses

import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import headflow.dynamics as d
from headflow.dynamics.activations import get_activation
from headflow.dynamics.expectations import MonteCarlo, QuasiMonteCarlo
from headflow.dynamics.priors import FlippedSpike, OneHot
from headflow.validation.experiments.pruning import (PruneCurve, Pruned, SubsetRisk,
                                                     first_needed_jump, prunable_count,
                                                     prune_curve, pruned_model, random_curves,
                                                     remove_heads)

from _util import ACTIVATIONS, Z, make_model, teacher_for

PER_HEAD = ("softmax", "softmax1")


def _state(H=3, F=1, seed=0):
    """A generic on-manifold state with O(1) overlaps of every kind."""
    k1, k2, k3, k4 = jr.split(jr.key(seed), 4)
    A = jr.normal(k1, (H, H + F)) * 0.8
    q = A @ A.T
    m = A[:, :F] * 1.5
    q = q + m @ m.T - A[:, :F] @ A[:, :F].T   # r = q - m mᵀ = A_⊥ A_⊥ᵀ (PSD)
    Bv = jr.normal(k2, (H, H + 1)) * 0.6
    s = Bv @ Bv.T
    n = Bv[:, 0]                               # Σ = [[s, n], [nᵀ, 1]] PSD
    b = jr.normal(k3, (H,))
    del k4
    return d.Overlaps.manifold(m=m, q=q, n=n, s=s, b=b)


def _zero_values(ov, h):
    n = ov.n.at[h].set(0.0)
    s = ov.s.at[h, :].set(0.0).at[:, h].set(0.0)
    return dataclasses.replace(ov, n=n, s=s)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_pruned_activation_is_the_smaller_model(activation):
    """`Pruned(keep)` gives the kept heads the attention of the smaller model (any joint
    normalization runs over the kept heads only) and zero to the others."""
    base = get_activation(activation)
    chi = jr.normal(jr.key(1), (4, 5)) * 2.0
    b = jr.normal(jr.key(2), (4,))
    keep = (0, 2, 3)
    A = Pruned(base=base, keep=keep)(chi, b)
    np.testing.assert_allclose(A[np.array(keep)], base(chi[np.array(keep)], b[np.array(keep)]),
                               rtol=1e-14, atol=1e-15)
    np.testing.assert_array_equal(A[1], 0.0)
    np.testing.assert_array_equal(Pruned(base=base, keep=())(chi, b), 0.0)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_masked_risk_equals_risk_of_the_smaller_state(activation):
    """The risk with heads masked (common nodes) equals the population risk of the literally
    smaller model (`remove_heads`, H−1 heads, its own nodes) within the Monte Carlo errors."""
    ov = _state(H=3)
    model = make_model(activation, L=3, H=3)
    keep = (0, 2)
    r_mask, e_mask = d.population_risk(pruned_model(model, keep), ov, MonteCarlo(1 << 15, 1),
                                       manifold=True)
    small = dataclasses.replace(model, H=2)
    r_small, e_small = d.population_risk(small, remove_heads(ov, keep),
                                         MonteCarlo(1 << 15, 2), manifold=True)
    assert abs(float(r_mask - r_small)) < Z * float(jnp.hypot(e_mask, e_small))
    # and removing nothing is the model itself, to round-off
    r_all, _ = d.population_risk(model, ov, MonteCarlo(1 << 12, 1), manifold=True)
    r_keep_all, _ = d.population_risk(pruned_model(model, (0, 1, 2)), ov,
                                      MonteCarlo(1 << 12, 1), manifold=True)
    assert float(r_keep_all) == pytest.approx(float(r_all), rel=1e-12)


@pytest.mark.parametrize("activation", PER_HEAD)
def test_zero_value_head_prunes_for_free_with_per_head_normalization(activation):
    """Per-head activations: a head whose value overlaps are all zero (`n_h = 0`, `s_h· = 0`)
    outputs ŷ_h ≡ 0, so removing it changes nothing, to round-off on common nodes (whatever
    its key and bias) and within MC error against the literally smaller model."""
    model = make_model(activation, L=3, H=3)
    ov = _zero_values(_state(H=3, seed=4), 1)
    sub = SubsetRisk(model, ov, MonteCarlo(1 << 13, 0), manifold=True)
    full, pruned = sub((0, 1, 2))[0], sub((0, 2))[0]
    assert pruned == pytest.approx(full, rel=1e-12, abs=1e-14)
    # a head with values does matter (the check can fail)
    assert abs(sub((1, 2))[0] - full) > 1e-3
    small = dataclasses.replace(model, H=2)
    r, e = d.population_risk(small, remove_heads(ov, (0, 2)), MonteCarlo(1 << 15, 7),
                             manifold=True)
    assert abs(float(r) - full) < Z * (float(e) + sub((0, 2))[1])


def test_zero_value_head_changes_bayes_softmax_unless_its_attention_is_zero():
    """Bayes-softmax normalizes jointly over heads: a zero-value head still takes attention
    mass from the others, so removing it changes the risk. It changes nothing exactly when the
    head also has zero attention, `e^{b_h} = 0` (bias → −∞)."""
    model = make_model("bayes_softmax", L=3, H=3)
    ov = _zero_values(_state(H=3, seed=5), 1)
    sub = SubsetRisk(model, ov, MonteCarlo(1 << 14, 0), manifold=True)
    (full, e_full), (pruned, e_pruned) = sub((0, 1, 2)), sub((0, 2))
    assert abs(pruned - full) > 10 * (e_full + e_pruned)
    dead = dataclasses.replace(ov, b=ov.b.at[1].set(-1e4))   # e^{b} underflows to 0
    sub = SubsetRisk(model, dead, MonteCarlo(1 << 14, 0), manifold=True)
    assert sub((0, 2))[0] == pytest.approx(sub((0, 1, 2))[0], rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("activation", PER_HEAD)
def test_zero_value_head_of_sgd_weights(activation):
    """SGD weights (off the manifold, cross overlaps kept): zeroing a head's value vector makes
    every value overlap of that head vanish, and pruning it changes nothing."""
    model = make_model(activation, L=3, H=3)
    teacher = teacher_for(model, 400, seed=1)
    w = d.init_weights(jr.key(3), 3, 400, key_std=1.0, value_std=1.0, bias=0.2,
                       dtype=jnp.float64)
    K = w.K.at[0].add(1.5 * teacher.kstar[0])
    V = w.V.at[0].add(teacher.vstar).at[2].set(0.0)
    ov = d.Weights(K=K, V=V, b=w.b).overlaps(teacher)
    assert float(jnp.max(jnp.abs(ov.kv[:, 2]))) == 0.0 and float(ov.n[2]) == 0.0
    sub = SubsetRisk(model, ov, MonteCarlo(1 << 13, 0), manifold=False)
    assert sub((0, 1))[0] == pytest.approx(sub((0, 1, 2))[0], rel=1e-12, abs=1e-14)
    assert abs(sub((1, 2))[0] - sub((0, 1, 2))[0]) > 1e-3


def _live_heads(activation, model):
    """Two useful heads: the Bayes-softmax construction (one head per sign of the spike) for
    softmax-1 and Bayes-softmax; for per-head softmax, whose heads cannot switch off (a head on
    the minority sign only adds noise), two heads on the majority sign with values along v*, as
    gradient flow finds them (spike a = 3: m ≈ 1.4, n ≈ 0.48, 0.36)."""
    if activation != "softmax":
        return d.bayes_construction(dataclasses.replace(model, H=2))[0]
    m = jnp.array([[1.43], [1.40]])
    n = jnp.array([0.48, 0.36])
    return d.Overlaps.manifold(m=m, q=m @ m.T, n=n, s=jnp.outer(n, n), b=jnp.zeros(2))


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_greedy_pruning_removes_dead_heads_first(activation):
    """A trained-looking state: two useful heads plus two dead ones (zero values; for
    Bayes-softmax also zero attention). Greedy pruning removes the two dead heads at no cost
    (prunable = 2), then needs a head: the risk jumps. Random orders are worse on average, and
    pruning everything leaves ŷ ≡ 0, R = Δ² + ρ*."""
    prior = FlippedSpike(3.0, 0.7, [1.0])
    model = make_model(activation, L=3, H=4, prior=prior)
    live = _live_heads(activation, model)
    H = 4
    m = jnp.concatenate([live.m, jnp.array([[0.5], [-0.3]])])
    q = jnp.zeros((H, H)).at[:2, :2].set(live.q).at[2:, 2:].set(m[2:] @ m[2:].T
                                                               + 0.5 * jnp.eye(2))
    n = jnp.concatenate([live.n, jnp.zeros(2)])
    s = jnp.zeros((H, H)).at[:2, :2].set(live.s)
    b = jnp.concatenate([live.b, jnp.full(2, -1e4 if activation == "bayes_softmax" else 0.3)])
    perm = np.array([2, 0, 3, 1])                     # dead heads are 0 and 2 after this
    ov = d.Overlaps.manifold(m=m[perm], q=q[np.ix_(perm, perm)], n=n[perm],
                             s=s[np.ix_(perm, perm)], b=b[perm])
    backend = QuasiMonteCarlo(samples=1 << 13, seed=0)
    sub = SubsetRisk(model, ov, backend, manifold=True)
    for criterion in ("greedy", "ablation"):
        curve = prune_curve(model, ov, backend, criterion=criterion, sub=sub)
        assert set(curve.order[:2]) == {0, 2}
        assert curve.risk[2] == pytest.approx(curve.risk[0], rel=1e-10)
        assert curve.prunable() == 2
        jump = first_needed_jump(curve)
        assert jump["pruned_before"] == 2 and jump["jump"] > 0.05
    assert curve.risk[-1] == pytest.approx(model.noise**2 + model.rho, rel=1e-12)
    rand = random_curves(sub, 6, seed=0)
    assert all(c.risk[0] == curve.risk[0] and c.risk[-1] == curve.risk[-1] for c in rand)
    assert np.mean([c.risk[2] for c in rand]) > curve.risk[2]


def test_prunable_count():
    assert prunable_count([1.0, 1.01, 1.049, 1.2, 3.0]) == 2
    assert prunable_count([1.0, 1.06, 1.0]) == 0        # first exceedance counts
    assert prunable_count([1.0, 0.9, 1.0]) == 2         # all heads can go
    c = PruneCurve(criterion="greedy", order=(1, 0, 2), risk=np.array([1.0, 1.02, 2.0, 3.0]),
                   risk_err=np.zeros(4))
    j = first_needed_jump(c)
    assert j == {"pruned_before": 1, "head": 0, "risk_before": 1.02, "risk_after": 2.0,
                 "jump": pytest.approx(0.98), "jump_rel": pytest.approx(0.98 / 1.02)}
    assert first_needed_jump(PruneCurve(criterion="greedy", order=(0,),
                                        risk=np.array([1.0, 1.0]),
                                        risk_err=np.zeros(2))) is None


def test_one_hot_specialized_heads_are_needed():
    """One-hot prior, F = 2, Bayes-softmax construction (one head per feature): each head is
    needed; removing either raises the risk by more than the 5% tolerance."""
    prior = OneHot(3.0, 2)
    model = make_model("bayes_softmax", L=3, H=2, prior=prior)
    ov, _ = d.bayes_construction(model)
    curve = prune_curve(model, ov, QuasiMonteCarlo(samples=1 << 12, seed=0))
    assert curve.prunable() == 0


PRUNE_FLAGS = ["--set", "model.L=3", "--set", "model.H=2", "--set", "ode.samples=256",
               "--set", "ode.expectation=\"qmc\"", "--set", "ode.rtol=1e-5", "--set",
               "ode.atol=1e-7", "--risk-samples", "1024", "--random-orders", "2", "--json"]


def _cli_json(capsys, argv):
    import json

    from headflow.validation.cli import main

    assert main(argv) == 0
    out = capsys.readouterr().out
    return json.loads(out.strip().splitlines()[-1]), out


def test_prune_command_from_ode_states(tmp_path, capsys):
    """`headflow prune`: the interface keys, 0..H heads pruned, the unpruned risk equal to the
    trained state's risk (same nodes), and everything pruned leaving ŷ ≡ 0 (R = Δ² + ρ*)."""
    s, text = _cli_json(capsys, ["prune", "--out", str(tmp_path / "p"), "--activations",
                                 "bayes_softmax", "--t-max", "30", "--t-first", "15"]
                        + PRUNE_FLAGS)
    assert "mode: gradient-flow ODE" in text and s["mode"] == "gradient_flow"
    assert s["pruned"] == [0, 1, 2]
    r = s["risk"]["bayes_softmax"]
    assert len(r) == 3
    assert r[0] == pytest.approx(s["trained"]["bayes_softmax"]["risk"], rel=1e-10)
    assert r[-1] == pytest.approx(s["null_risk"], rel=1e-12)   # on the manifold: exact
    assert s["prunable"]["bayes_softmax"] == prunable_count(r)
    assert sorted(s["orders"]["bayes_softmax"][0]) == [0, 1]
    assert len(s["heads"]["bayes_softmax"]["attention_signal"]) == 2
    for name in ("prune.json", "prune.npz", "prune.png", "config.toml", "meta.json"):
        assert (tmp_path / "p" / name).is_file(), name


def test_prune_command_from_sgd_weights(tmp_path, capsys):
    s, _ = _cli_json(capsys, ["prune", "--out", str(tmp_path / "p"), "--activations",
                              "softmax", "--source", "sgd", "--dim", "40", "--seeds", "2",
                              "--set", "training.t_max=0.5", "--set", "sim.risk_samples=1024"]
                     + PRUNE_FLAGS)
    assert s["source"] == "sgd" and s["mode"] == "sgd"
    assert len(s["prunable_per_seed"]["softmax"]) == 2
    # ŷ ≡ 0: R = Δ² + ρ* in expectation (off the manifold y* correlates with the key fields,
    # so the estimate is not exact node by node)
    for curve, err in zip(s["risk_per_run"]["softmax"], s["risk_per_run_err"]["softmax"]):
        assert abs(curve[-1] - s["null_risk"]) < Z * err[-1]
    # per seed, the unpruned risk is the SGD weights' recorded risk (MC, other nodes)
    tr = s["trained"]["softmax"]
    for curve, err, rec, rec_err in zip(s["risk_per_run"]["softmax"],
                                        s["risk_per_run_err"]["softmax"], tr["risk_final"],
                                        tr["risk_final_err"]):
        assert abs(curve[0] - rec) < Z * (err[0] + rec_err)
    assert s["risk"]["softmax"][0] == pytest.approx(np.mean([c[0] for c in
                                                            s["risk_per_run"]["softmax"]]))


def test_prune_command_bad_input(tmp_path, capsys):
    from headflow.validation.cli import main

    with pytest.raises(SystemExit) as exit_:         # refused by the parser, as every option
        main(["prune", "--out", str(tmp_path / "p"), "--random-orders", "-1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--random-orders" in err[0]
    assert not (tmp_path / "p").exists()
