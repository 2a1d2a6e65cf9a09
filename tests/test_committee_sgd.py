"""Online SGD of the committee machine (`kind = "committee"`, `docs/committee.md`): the weight-space
step against a hand-written numpy step to round-off; at D = 500 (erf units, K = M = 2, both
layers trained, label noise σ = 0.1, η = η_v = 0.5, t ≤ 10: the fall of the risk into the
unspecialized plateau) weight-space and overlap-space SGD agree with each other in law
(two-sample KS on every order parameter and the risk at every save time), their seed means
follow the ODE from the D → ∞ start, and each run follows the ODE from its own initial state.

Conventions: student `φ = Σ_k v_k g(λ_k)`, teacher `y = Σ_m A_m g(ν_m) + σζ`,
`g(x) = erf(x/√2)`, `Δ = φ − y`; one step on a batch of B inputs x_b is
`w_k ← (1 − ηκ/D) w_k − (η/(B√D)) Σ_b v_k g'(λ_bk) Δ_b x_b`,
`v_k ← v_k − (η_v/(BD)) Σ_b g(λ_bk) Δ_b`. Every seed is fixed.
"""

from __future__ import annotations

import math

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import scipy.stats as st
from scipy.special import erf

from headflow import sims
from headflow.dynamics import StepSizes
from headflow.dynamics.config import Config
from headflow.dynamics.models import Committee, GramState, ModelWeights
from headflow.dynamics.ode import Integrator, model_field, risk_rule, run_ode, solve, states_risk
from headflow.dynamics.units import get_unit
from headflow.dynamics.models._sgd import weight_step

Z = 5.0  # z-score threshold; all seeds are fixed, so a miss beyond 5σ means a bug


# -- one step against numpy ----------------------------------------------------------------------

def numpy_step(W, Ws, v, A, X, xi, *, lr, lr_v, wd, sigma, train_v):
    """The committee's SGD step written out in numpy (float64): `W (K, D)`, `Ws (M, D)`,
    `X (B, D)` the batch, `xi (B)` the label noise's standard normals."""
    B, D = X.shape
    lam, nu = X @ W.T / np.sqrt(D), X @ Ws.T / np.sqrt(D)            # (B, K), (B, M)
    g = erf(lam / math.sqrt(2.0))
    dg = math.sqrt(2.0 / math.pi) * np.exp(-0.5 * lam**2)
    y = erf(nu / math.sqrt(2.0)) @ A + sigma * xi
    delta = g @ v - y                                               # (B,)
    W_new = (1.0 - lr * wd / D) * W - (lr / (B * np.sqrt(D))) * (
        (v[None, :] * dg * delta[:, None]).T @ X)
    v_new = v - (lr_v / (B * D)) * (g * delta[:, None]).sum(axis=0) if train_v else v
    return W_new, v_new


STEP_CASES = {
    "batch1": dict(B=1, wd=0.0, sigma=0.1, lr=0.5, lr_v=0.5, train_v=True),
    "batch3_decay": dict(B=3, wd=0.3, sigma=0.4, lr=0.9, lr_v=0.35, train_v=True),
    "frozen_second_layer": dict(B=2, wd=0.0, sigma=0.2, lr=0.7, lr_v=0.5, train_v=False),
}


@pytest.mark.parametrize("case", list(STEP_CASES))
def test_weight_step_equals_numpy_step(case):
    """`headflow.dynamics.models._sgd.weight_step` on the batch it draws (`X`, `ξ` from
    `jr.split(key)`, as it draws them) equals the hand-written step to float64 round-off: first
    layer, second layer (or frozen), teacher untouched."""
    c = STEP_CASES[case]
    K, M, D = 2, 2, 60
    A = np.array([1.0, 0.6])
    model = Committee(K=K, M=M, unit=get_unit("erf"), noise=c["sigma"],
                      teacher_second_layer=jnp.asarray(A), train_second_layer=c["train_v"])
    rng = np.random.default_rng(0)
    W, Ws = rng.standard_normal((K, D)), rng.standard_normal((M, D))
    v = np.array([0.8, -0.3])
    w = ModelWeights(students=jnp.asarray(W), teachers=jnp.asarray(Ws),
                     params={"v": jnp.asarray(v), "A": jnp.asarray(A)})
    hp = StepSizes(lr=c["lr"], lr_bias=c["lr_v"], weight_decay=c["wd"], batch=c["B"])
    key = jr.key(7)
    new = eqx.filter_jit(weight_step)(model, hp, w, key)
    kx, kn = jr.split(key)                                  # the draws of weight_step
    X = np.asarray(jr.normal(kx, (c["B"], D), dtype=jnp.float64))
    xi = np.asarray(jr.normal(kn, (c["B"],), dtype=jnp.float64))
    W_ref, v_ref = numpy_step(W, Ws, v, A, X, xi, lr=c["lr"], lr_v=c["lr_v"], wd=c["wd"],
                              sigma=c["sigma"], train_v=c["train_v"])
    assert np.max(np.abs(W_ref - W)) > 1e-2                 # the step moved the weights
    np.testing.assert_allclose(np.asarray(new.students), W_ref, rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.asarray(new.params["v"]), v_ref, rtol=0, atol=1e-15)
    if c["train_v"]:
        assert np.max(np.abs(v_ref - v)) > 1e-4
    else:
        np.testing.assert_array_equal(np.asarray(new.params["v"]), v)
    np.testing.assert_array_equal(np.asarray(new.teachers), Ws)
    np.testing.assert_array_equal(np.asarray(new.params["A"]), A)


# -- runs at D = 500 -------------------------------------------------------------------------------

D, T_MAX, N_SAVE = 500, 10.0, 6
SEEDS_W, SEEDS_O = range(64), range(1000, 1256)

TOML = f"""
[model]
kind = "committee"
K = 2
M = 2
activation = "erf"
noise = 0.1
train_second_layer = true

[training]
lr = 0.5
t_max = {T_MAX}

[sim]
dim = {D}
seeds = {len(SEEDS_W)}

[output]
n_save = {N_SAVE}
"""


def scalars(model: Committee, state: GramState, risk) -> dict[str, np.ndarray]:
    """Every order parameter entry that moves (Q once per pair, R, v) and the risk, as arrays
    with the batch and time axes of `state`."""
    n = {k: np.asarray(v) for k, v in model.named(state).items()}
    out = {"risk": np.asarray(risk)}
    K, M = model.K, model.M
    for i in range(K):
        for j in range(i, K):
            out[f"Q{i}{j}"] = n["Q"][..., i, j]
        for m in range(M):
            out[f"R{i}{m}"] = n["R"][..., i, m]
        out[f"v{i}"] = n["v"][..., i]
    return out


@eqx.filter_jit
def _odes_from(field, starts: GramState, ts, integrator: Integrator) -> GramState:
    """The ODE from each of `starts` (a leading batch axis), vmapped."""
    return jax.vmap(lambda s: solve(dfx.ODETerm(field), s, ts, integrator).ys)(starts)


@pytest.fixture(scope="module")
def runs():
    """Through the config: `run_ode` from the D → ∞ start; `run_sgd` in weight space
    (float32, seeds 0–63) and in overlap space (seeds 1000–1255); and the ODE (the exact
    field of `run_ode`) from every run's own initial state."""
    cfg = Config.from_toml(TOML)
    assert cfg.ode.expectation == "exact"
    model = cfg.build_model()
    times = cfg.save_times()
    ode = run_ode(cfg.replace(**{"ode.init": "symmetric"}))
    ws = sims.run_sgd(cfg)
    ov = sims.run_sgd(cfg.replace(**{"sim.space": "overlaps", "sim.seed": SEEDS_O[0],
                                     "sim.seeds": len(SEEDS_O)}))
    assert ws.seeds == tuple(SEEDS_W) and ov.seeds == tuple(SEEDS_O)
    for r in (ode, ws, ov):
        np.testing.assert_allclose(np.asarray(r.t), times, atol=1e-12)
        assert np.all(np.asarray(r.risk_err) == 0.0)            # the closed-form risk
    starts = jax.tree.map(lambda a, b: jnp.concatenate([a[:, 0], b[:, 0]]),
                          ws.overlaps, ov.overlaps)
    own = _odes_from(model_field(cfg), starts, jnp.asarray(times),
                     Integrator.from_config(cfg.ode))
    own_risk, _ = states_risk(model, own, risk_rule(cfg))
    n = len(SEEDS_W)
    return dict(
        cfg=cfg, model=model, times=times, ode_result=ode, starts=starts, own=own,
        ode=scalars(model, ode.overlaps, ode.risk),
        weights=scalars(model, ws.overlaps, ws.risk),
        overlaps=scalars(model, ov.overlaps, ov.risk),
        own_weights=scalars(model, jax.tree.map(lambda x: x[:n], own), own_risk[:n]),
        own_overlaps=scalars(model, jax.tree.map(lambda x: x[n:], own), own_risk[n:]))


@pytest.mark.slow
def test_weights_and_overlaps_equal_in_law(runs):
    """Every entry of Q, R, v and the risk at every save time: two-sample KS between
    weight-space (64 seeds) and overlap-space (256 seeds) SGD, Bonferroni-corrected p ≥ 0.01;
    the same for each run's deviation from the ODE from its own start (the SGD noise alone,
    the spread of the initial states removed). Entries constant in both (v at t = 0) agree
    exactly."""
    a, b = runs["weights"], runs["overlaps"]
    pvals = {}
    for name in a:
        for t in range(N_SAVE):
            x, y = a[name][:, t], b[name][:, t]
            if np.ptp(x) == 0 and np.ptp(y) == 0:
                assert x[0] == y[0], name
                continue
            pvals[f"{name}@t={runs['times'][t]:g}"] = st.ks_2samp(x, y).pvalue
            if t > 0:
                dx = x - runs["own_weights"][name][:, t]
                dy = y - runs["own_overlaps"][name][:, t]
                pvals[f"d{name}@t={runs['times'][t]:g}"] = st.ks_2samp(dx, dy).pvalue
    worst = min(pvals, key=pvals.get)
    print(f"KS weights vs overlaps: {len(pvals)} tests, smallest p = {pvals[worst]:.4f} "
          f"({worst}), median p = {np.median(list(pvals.values())):.3f}")
    assert len(pvals) >= 100
    assert pvals[worst] * len(pvals) >= 0.01, (worst, pvals[worst], len(pvals))


@pytest.mark.slow
def test_seed_means_follow_the_ode(runs):
    """Each simulator's seed mean of every entry and the risk at every save time t > 0 within
    5 standard errors of the ODE from the D → ∞ start (`run_ode`, `ode.init = "symmetric"`);
    the risk fell far beyond those error bars (into the unspecialized plateau: R_in all alike,
    Q_12 small)."""
    ode = runs["ode"]
    for space in ("weights", "overlaps"):
        sim = runs[space]
        z = {name: (sim[name][:, 1:].mean(axis=0) - ode[name][1:])
             / (sim[name][:, 1:].std(axis=0, ddof=1) / np.sqrt(sim[name].shape[0]))
             for name in sim}
        worst = max(z, key=lambda k: np.max(np.abs(z[k])))
        print(f"SGD ({space}) seed means vs ODE: largest |z| = {np.max(np.abs(z[worst])):.2f} "
              f"({worst}); risk z = {np.round(z['risk'], 2)}")
        assert np.max(np.abs(z[worst])) < Z, (space, worst, z[worst])
    risk = ode["risk"]
    assert risk[-1] < 0.1 * risk[0], risk
    se0 = runs["weights"]["risk"][:, -1].std() / np.sqrt(len(SEEDS_W))
    assert risk[0] - risk[-1] > 100 * se0
    # the plateau: every student unit alike on every teacher unit, barely specialized
    R = np.array([ode[f"R{i}{m}"][-1] for i in range(2) for m in range(2)])
    assert np.ptp(R) < 1e-8 and R[0] > 0.3 and abs(ode["Q01"][-1]) < 0.2


@pytest.mark.slow
def test_each_run_follows_the_ode_from_its_own_start(runs):
    """Per run, the deviation of SGD from the ODE started at that run's own initial state
    (the exact field, vmapped over the 320 starts): its mean over the runs within 5 standard
    errors of zero for every entry and the risk at every save time, in both spaces; it is
    O(D^{-1/2}), and smaller than the spread of the runs themselves at t = 2 (the initial
    states explain part of it). The ODE of one start is `run_ode(cfg, start)`'s."""
    z_all = {}
    for space in ("weights", "overlaps"):
        sim, own = runs[space], runs[f"own_{space}"]
        for name in sim:
            np.testing.assert_allclose(own[name][:, 0], sim[name][:, 0], rtol=0, atol=0)
            d = sim[name][:, 1:] - own[name][:, 1:]
            z_all[f"{space}:{name}"] = d.mean(axis=0) / (d.std(axis=0, ddof=1)
                                                         / np.sqrt(len(d)))
            assert np.all(d.std(axis=0) < 3.0 / np.sqrt(D)), (space, name, d.std(axis=0))
            if name.startswith("R"):
                assert d[:, 0].std() < sim[name][:, 1].std(), (space, name)
    worst = max(z_all, key=lambda k: np.max(np.abs(z_all[k])))
    print(f"paired SGD − own-start ODE: largest |z| = {np.max(np.abs(z_all[worst])):.2f} "
          f"({worst}) over {len(z_all) * (N_SAVE - 1)} means")
    assert np.max(np.abs(z_all[worst])) < Z, (worst, z_all[worst])
    # the engine's own run from one of those starts is the vmapped ODE's
    start = jax.tree.map(lambda x: x[0], runs["starts"])
    res = run_ode(runs["cfg"], start, runs["times"])
    for got, want in zip(jax.tree.leaves(res.overlaps),
                         jax.tree.leaves(jax.tree.map(lambda x: x[0], runs["own"]))):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(res.risk), runs["own_weights"]["risk"][0],
                               rtol=1e-10, atol=1e-12)


@pytest.mark.fast_compile
def test_batch_and_weight_decay_follow_the_ode():
    """With a batch of 3 and weight decay 0.2 (η = 0.9, η_v = 0.3, σ = 0.3), overlap-space SGD
    at D = 2000 (32 seeds) against the exact ODE from the D → ∞ start: the seed means of every
    entry and of the risk at every save time t > 0 within 5 standard errors. The ODE with a
    batch of 1 (its η² term three times too large) or without the decay is rejected by the
    same runs: the comparison resolves what it checks."""
    base = Config.from_toml(TOML).replace(**{
        "training.batch": 3, "training.weight_decay": 0.2, "training.lr": 0.9,
        "training.lr_second": 0.3, "model.noise": 0.3, "training.t_max": 6.0,
        "output.n_save": 7, "sim.dim": 2000, "sim.seeds": 32, "sim.space": "overlaps"})
    model = base.build_model()
    sim = scalars(model, *(lambda r: (r.overlaps, r.risk))(sims.run_sgd(base)))

    def worst_z(cfg) -> float:
        ode = run_ode(cfg.replace(**{"ode.init": "symmetric"}))
        ref = scalars(model, ode.overlaps, ode.risk)
        z = [np.abs(sim[k][:, 1:].mean(axis=0) - ref[k][1:])
             / (sim[k][:, 1:].std(axis=0, ddof=1) / np.sqrt(sim[k].shape[0])) for k in sim]
        return float(np.max(z))

    right = worst_z(base)
    wrong_batch = worst_z(base.replace(**{"training.batch": 1}))
    wrong_decay = worst_z(base.replace(**{"training.weight_decay": 0.0}))
    print(f"largest |z|: batch 3 and decay {right:.2f}; batch 1 {wrong_batch:.1f}; "
          f"no decay {wrong_decay:.1f}")
    assert right < Z
    assert wrong_batch > Z and wrong_decay > Z
