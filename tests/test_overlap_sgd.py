"""Online SGD in overlap space (`headflow.dynamics.models.attention._chain`,
`docs/overlap-sgd.md`): the one-step map against the weight-space step to round-off, the
whitening/Wishart decomposition of the token Gram matrix, the exact χ² and initial-state
samplers, equivalence in law with the weight-space simulator (two-sample KS), reproducibility,
failures, frozen values, batches, weight decay."""

from __future__ import annotations

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import scipy.stats as st
from _util import (Z, correlated_weights, make_model, optimized, teacher_for,
                   xla_optimizations)

from headflow import sims
from headflow.dynamics import (DivergenceError, HeadflowError, Overlaps, StepSizes, Weights,
                               sample_data)
from headflow.dynamics.models.attention import random_start
from headflow.dynamics.priors import Discrete, FlippedSpike
from headflow.dynamics._wishart import bartlett, chi_square, psd_factor
from headflow.dynamics.models.attention._chain import (expand_overlaps, gram_update,
                                                      initial_gram, n_rows, reduce_overlaps)
from headflow.sims.attention import simulate_overlaps


@pytest.fixture(autouse=True, scope="module")
def _fast_compile():
    # dominated by compiling a few programs that then run briefly (see conftest._FAST_COMPILE)
    with xla_optimizations(False):
        yield


def _weights_rows(w: Weights, teacher, model) -> np.ndarray:
    """The independent rows `[K, V?, K*, v*]` of the weights (float64)."""
    rows = [w.K] + ([w.V] if model.train_values else []) + [teacher.kstar, teacher.vstar[None]]
    return np.asarray(jnp.concatenate(rows).astype(jnp.float64))


# -- the one-step map ------------------------------------------------------------------------------

ONE_STEP = {
    "softmax1_noise_decay_batch3": dict(
        activation="softmax1", noise=0.3, rho=1.5, wd=0.7, batch=3,
        prior=Discrete([[1.5, 0.0], [-1.0, 1.0], [0.3, -2.0]], [0.3, 0.5, 0.2])),
    "bayes_softmax_frozen_decay_batch2": dict(train_values=False, rho=2.0, wd=0.5, batch=2,
                                              noise=0.2),
}


@eqx.filter_jit
def _weight_space_step(model, hp, D: int, key):
    """Off-manifold weights (every Gram block O(1)), one `headflow.sims.attention.sgd_step` on a
    batch, and that
    batch's fields and token Gram matrix."""
    teacher = teacher_for(model, D, seed=1)
    w = correlated_weights(jr.key(2), teacher, model.H)
    if not model.train_values:
        w = dataclasses.replace(w, V=jnp.broadcast_to(teacher.vstar, w.V.shape))
    new = sims.attention.sgd_step(model, hp, teacher, w, key)
    X, y = sample_data(key, teacher, model, hp.batch)        # the batch sgd_step drew
    W, W_new = (jnp.concatenate([u.K] + ([u.V] if model.train_values else [])
                                + [teacher.kstar, teacher.vstar[None]]) for u in (w, new))
    Xf = X.reshape(-1, D)
    return (w.overlaps(teacher), new.overlaps(teacher), W, W_new, X @ W.T / jnp.sqrt(D),
            Xf @ Xf.T, y, new.b)


@pytest.mark.parametrize("case", list(ONE_STEP))
def test_one_step_map_equals_weight_space_step(case):
    """`gram_update` with the true fields and token Gram matrix of one batch gives the Gram
    matrix after `headflow.sims.attention.sgd_step` on that batch, to float64 round-off (weight
    decay, batch, label noise, frozen values included)."""
    o = ONE_STEP[case]
    model = make_model(o.get("activation", "bayes_softmax"), L=3, H=2, prior=o.get("prior"),
                       noise=o.get("noise", 0.0), rho=o.get("rho", 1.0),
                       train_values=o.get("train_values", True))
    hp = StepSizes(lr=0.9, lr_bias=1.3, weight_decay=o.get("wd", 0.0), batch=o.get("batch", 1))
    D = 40
    ov, ov_new, W, W_new, lam, tokens, y, b_new = _weight_space_step(model, hp, D, jr.key(3))
    W, W_new = np.asarray(W), np.asarray(W_new)
    omega, b = reduce_overlaps(model, ov)
    np.testing.assert_allclose(omega, W @ W.T / D, atol=1e-13)
    got, got_b = eqx.filter_jit(gram_update)(model, hp, D, omega, b, lam, tokens, y)
    step = W_new @ W_new.T / D - W @ W.T / D
    assert np.max(np.abs(step)) > 1e-3                         # the step moved Ω
    np.testing.assert_allclose(got, W_new @ W_new.T / D, rtol=0, atol=1e-13)
    np.testing.assert_allclose(got_b, b_new, rtol=0, atol=1e-14)
    # the overlaps it stands for, cross overlaps included
    got_ov = expand_overlaps(model, got, got_b)
    for name, ref in ov_new.arrays().items():
        np.testing.assert_allclose(getattr(got_ov, name), ref, rtol=0, atol=1e-13, err_msg=name)


# -- the law of one step ---------------------------------------------------------------------------

def test_whitened_coordinates_and_wishart_remainder():
    """Real tokens at D = 24 against fixed weights (N = 6 rows): the whitened coordinates
    `c = C⁻¹λ` are standard normal (the signal token's shifted by exactly `Cᵀ e_{K*} θ`), and
    the remainder `O = x·x' − c·c'` has the moments of `Wishart(D − N, I_L)`, is uncorrelated
    with the fields, and has the law of the Bartlett sampler (two-sample KS per entry)."""
    model = make_model(L=3, H=2, rho=1.3)
    D, n, L = 24, 20_000, 3
    teacher = teacher_for(model, D, seed=4)
    w = correlated_weights(jr.key(5), teacher, model.H)
    W = _weights_rows(w, teacher, model)
    N = W.shape[0]
    omega = W @ W.T / D
    C, ok, _ = jax.jit(psd_factor)(jnp.asarray(omega))
    C = np.asarray(C)
    assert bool(ok)
    np.testing.assert_allclose(C @ C.T, omega, atol=1e-13)

    rng = np.random.default_rng(6)
    X = rng.standard_normal((n, L, D))
    theta = np.asarray(eqx.filter_jit(lambda k: model.prior.sample(k, (n,)))(jr.key(7)))
    X[:, 0] += theta @ np.asarray(teacher.kstar) / np.sqrt(D)                 # signal token 0
    lam = X @ W.T / np.sqrt(D)
    c = np.linalg.solve(C, lam.reshape(-1, N).T).T.reshape(n, L, N)
    shift = theta @ C[2 * model.H:2 * model.H + model.F]                      # Cᵀ e_K* θ
    g = c.copy()
    g[:, 0] -= shift
    flat = g.reshape(-1, N)
    assert np.all(np.abs(flat.mean(0)) < Z * np.sqrt(1 / len(flat)))
    cov = np.cov(flat.T)
    assert np.all(np.abs(cov - np.eye(N)) < Z * np.sqrt(2 / len(flat)))

    rest = np.einsum("nld,nkd->nlk", X, X) - np.einsum("nli,nki->nlk", c, c)   # O
    k = D - N
    iu = np.triu_indices(L)
    for a, bb in zip(*iu):
        x = rest[:, a, bb]
        mean, var = (k, 2 * k) if a == bb else (0.0, k)
        assert abs(x.mean() - mean) < Z * np.sqrt(var / n), (a, bb)
        assert abs(x.var() / var - 1) < Z * np.sqrt((2 + (12 / k if a == bb else 6 / k)) / n)
        # independent of the fields (and of θ): no correlation with λ², λ_ℓ λ_ℓ', θ
        for f in (lam[:, a, 0] ** 2, lam[:, a, 1] * lam[:, bb, 2], theta[:, 0], lam[:, 0, -1]):
            r = np.corrcoef(x, f)[0, 1]
            assert abs(r) < Z / np.sqrt(n), (a, bb, r)

    sampled = np.asarray(_sampled_remainder(jr.key(8), n, L, float(k)))
    pvals = [st.ks_2samp(rest[:, a, bb], sampled[:, a, bb]).pvalue for a, bb in zip(*iu)]
    assert min(pvals) * len(pvals) > 1e-3, pvals


@functools.partial(jax.jit, static_argnums=(1, 2))
def _sampled_remainder(key, n: int, L: int, k: float):
    """`n` draws of `T Tᵀ ~ Wishart(k, I_L)` by the chain's Bartlett sampler."""
    kc, kb = jr.split(key)
    T = jax.vmap(bartlett)(chi_square(kc, jnp.full((n, L), k) - jnp.arange(L)[None, :]),
                           jr.normal(kb, (n, L * (L - 1) // 2), dtype=jnp.float64))
    return T @ jnp.swapaxes(T, -1, -2)


@pytest.mark.parametrize("df", [2.0, 7.0, 300.0, 2e6])
def test_chi_square_is_exact(df):
    """KS against the exact χ² law, and its first three moments within error bars (at small df
    the skewness rules out a normal approximation; at df = 2·10⁶ this checks the accuracy of
    the acceptance test). At df = 2 about 2% of the proposals are rejected, which exercises the
    redraw loop."""
    n = 40_000
    x = np.asarray(jax.jit(chi_square)(jr.key(11), jnp.full((n // 4, 4), df)).reshape(-1))
    assert np.all(np.isfinite(x)) and np.all(x > 0)
    assert st.kstest(x, st.chi2(df).cdf).pvalue > 1e-3
    zx = (x - df) / np.sqrt(2 * df)
    for power, exact in ((1, 0.0), (2, 1.0), (3, np.sqrt(8 / df))):     # E z³: the skewness
        m = zx**power
        assert abs(m.mean() - exact) < Z * m.std() / np.sqrt(n), (power, m.mean(), exact)


@pytest.mark.parametrize("train_values", [True, False])
def test_initial_law_matches_random_start(train_values):
    """`initial_gram` (Gram matrix drawn in law) against the overlaps of actual random weights
    and teachers at the same D (`headflow.dynamics.models.attention.random_start`): KS on every
    entry."""
    model = make_model(L=3, H=2, rho=1.7, train_values=train_values)
    D, n = 30, 600
    std = dict(key_std=0.4, value_std=0.7, bias=0.25)
    ours = jax.jit(jax.vmap(lambda k: initial_gram(model, k, D, **std)))(
        jr.split(jr.key(12), n))
    theirs = jax.jit(jax.vmap(lambda k: reduce_overlaps(model, random_start(model, k, D, **std))))(
        jr.split(jr.key(13), n))
    np.testing.assert_array_equal(ours[1], 0.25)
    a, b = np.asarray(ours[0]), np.asarray(theirs[0])
    N = n_rows(model)
    s = N - model.F - 1
    pvals = []
    for i in range(s):                          # student rows (the teacher block is fixed)
        for j in range(i, N):
            pvals.append(st.ks_2samp(a[:, i, j], b[:, i, j]).pvalue)
    np.testing.assert_allclose(a[:, s:, s:], b[:, s:, s:], atol=1e-12)
    assert min(pvals) * len(pvals) > 0.01, np.round(pvals, 4)


# -- the Cholesky factor and failures --------------------------------------------------------------

def test_psd_factor():
    rng = np.random.default_rng(14)
    A = rng.standard_normal((6, 3))
    A[4] = 0.0                                                  # a zero row
    low_rank = A @ A.T                                          # PSD, rank 3
    factor = jax.jit(psd_factor)
    C, ok, pivot = factor(jnp.asarray(low_rank))
    assert bool(ok) and abs(float(pivot)) < 1e-10
    np.testing.assert_allclose(C @ C.T, low_rank, atol=1e-12)
    np.testing.assert_array_equal(np.triu(np.asarray(C), 1), 0.0)
    bad = low_rank - 0.01 * np.outer(np.eye(6)[5], np.eye(6)[5]) - 0.5 * np.eye(6)
    _, ok, pivot = factor(jnp.asarray(bad))
    assert not bool(ok) and float(pivot) < 0
    _, ok, pivot = factor(jnp.asarray(low_rank).at[2, 2].set(jnp.nan))
    assert not bool(ok) and np.isnan(float(pivot))


# -- runs ------------------------------------------------------------------------------------------

def _demo():
    model = make_model("bayes_softmax", L=4, H=2, prior=FlippedSpike(3.0, 0.7, [1.0]))
    return model, StepSizes(lr=1.0, lr_bias=1.0)


def _frozen():
    model = make_model("softmax1", L=3, H=2, prior=FlippedSpike(2.5, 0.65, [1.0]), noise=0.1,
                       rho=1.5, train_values=False)
    return model, StepSizes(lr=0.8, lr_bias=0.6, weight_decay=0.3, batch=2)


CONFIGS = {"demo": _demo, "frozen_decay_batch2": _frozen}
D_EQ, S_EQ, TIMES = 200, 64, np.array([0.0, 1.0, 3.0, 6.0])


@pytest.fixture(scope="module", params=list(CONFIGS))
def both_runs(request):
    """The two simulators on one configuration: D = 200, 64 runs each (different seeds)."""
    model, hp = CONFIGS[request.param]()
    ov = simulate_overlaps(model, hp, dim=D_EQ, seeds=range(S_EQ), times=TIMES)
    with optimized():                       # run time, not compile time, dominates this one
        ws = sims.attention.simulate(model, hp, dim=D_EQ, seeds=range(1000, 1000 + S_EQ),
                           times=TIMES).overlaps           # float32, the simulator's default
    return dict(name=request.param, model=model, hp=hp, overlaps=ov, weights=ws)


def _scalars(model, ov: Overlaps, risk) -> dict[str, np.ndarray]:
    """Every order parameter entry (symmetric ones once) and the risk, as (S, T) arrays."""
    out = {"risk": np.asarray(risk)}
    H = model.H
    for name, x in ov.arrays().items():
        x = x.reshape(*x.shape[:2], -1)
        for i in range(x.shape[-1]):
            if name in ("q", "s") and i // H > i % H:
                continue
            out[f"{name}[{i}]"] = x[..., i]
    return out


def test_equivalence_in_law(both_runs):
    """Every order parameter and the risk at every save time: two-sample KS between the overlap
    chain and weight-space SGD, Bonferroni-corrected p ≥ 0.01. Entries constant in both (frozen
    values, t = 0 biases) must agree exactly."""
    r = both_runs
    model = r["model"]
    risks = sims.attention.recorded_risk(model, jax.tree.map(lambda a, b: jnp.concatenate([a, b]),
                                                   r["overlaps"], r["weights"]), samples=1024)[0]
    a = _scalars(model, r["overlaps"], risks[:S_EQ])
    b = _scalars(model, r["weights"], risks[S_EQ:])
    pvals = {}
    for name in a:
        for t in range(len(TIMES)):
            x, y = a[name][:, t], b[name][:, t]
            if np.ptp(x) == 0 and np.ptp(y) < 1e-5 * max(1.0, np.abs(y).max()):
                # fixed by construction (frozen values, t = 0 biases): the weight-space
                # values (float32) may only carry round-off
                np.testing.assert_allclose(y, x[0], rtol=1e-5, atol=1e-6, err_msg=name)
                continue
            pvals[f"{name}@t={TIMES[t]:g}"] = st.ks_2samp(x, y).pvalue
    assert len(pvals) >= 40
    worst = min(pvals, key=pvals.get)
    assert pvals[worst] * len(pvals) >= 0.01, (worst, pvals[worst], len(pvals))
    # the dynamics went somewhere: the risk fell far beyond its error bar
    drop = a["risk"][:, 0] - a["risk"][:, -1]
    assert drop.mean() > Z * drop.std() / np.sqrt(S_EQ), (drop.mean(), drop.std())


def test_values_frozen_or_trained_as_configured(both_runs):
    """With frozen values `v_h = v*` exactly: `n = ρ*`, `s = ρ*`, `vks = 0`, `kv = kvs`, while
    the keys learn. With trained values the value overlaps move."""
    model, ov = both_runs["model"], both_runs["overlaps"]
    if model.train_values:
        assert np.all(np.abs(ov.s[:, -1] - ov.s[:, 0]).max(axis=(-1, -2)) > 1e-2)
        assert np.all(np.abs(ov.n[:, -1] - ov.n[:, 0]).max(axis=-1) > 1e-2)
        return
    np.testing.assert_allclose(ov.n, model.rho, rtol=1e-14)
    np.testing.assert_allclose(ov.s, model.rho, rtol=1e-14)
    np.testing.assert_array_equal(ov.vks, 0.0)
    np.testing.assert_array_equal(ov.kv, jnp.broadcast_to(ov.kvs[..., None], ov.kv.shape))
    assert np.all(np.abs(ov.q[:, -1] - ov.q[:, 0]).max(axis=(-1, -2)) > 1e-2)


def test_same_seeds_same_run():
    """Bit for bit: the same seeds give the same run; a seed's run does not depend on the other
    seeds beside it (here reversed) nor on where the run is cut for saving (137 cuts a block of
    random numbers); other seeds give other runs."""
    model, hp = _demo()
    seeds = list(range(S_EQ))

    def run(seeds, times):
        return simulate_overlaps(model, hp, dim=D_EQ, seeds=seeds, times=times)

    a, again = run(seeds, TIMES), run(seeds, TIMES)
    cut = run(seeds[::-1], [0.0, 137 / D_EQ, TIMES[2], TIMES[3]])
    other = run([s + S_EQ for s in seeds], TIMES)
    for name, x in a.arrays().items():
        np.testing.assert_array_equal(getattr(again, name), x, err_msg=name)
        np.testing.assert_array_equal(getattr(cut, name)[::-1][:, 2:], x[:, 2:], err_msg=name)
        if name != "b":                     # b starts at b_0 for every seed
            assert not np.any(getattr(other, name)[:, 1:] == x[:, 1:]), name


def test_divergence_is_reported():
    """A learning rate far too large: a one-line DivergenceError naming the seed and time."""
    model, hp = _demo()
    with pytest.raises(DivergenceError, match=r"\(seed \d+, D=200\).* t = [0-9.e+-]+ \(step "
                       ) as info:
        simulate_overlaps(model, dataclasses.replace(hp, lr=1e4), dim=D_EQ,
                          seeds=range(S_EQ), times=TIMES)
    assert "\n" not in str(info.value)


def test_invalid_initial_gram_is_reported():
    """Initial overlaps that are no Gram matrix (`q_11 < m_1²` for the second seed): a
    one-line error naming that seed at t = 0, before any step."""
    model, hp = _demo()
    m = np.broadcast_to(np.array([[0.5], [0.3]]), (2, 2, 1))
    q = np.array([np.eye(2), 0.2 * np.eye(2)])              # second seed: 0.2 < 0.5²
    s = np.broadcast_to(0.5 * np.eye(2), (2, 2, 2))
    init = Overlaps.manifold(m, q, np.zeros((2, 2)), s, np.zeros((2, 2)))
    with pytest.raises(DivergenceError, match=r"seed 8, D=200.* t = 0 \(step 0\).*pivot -")\
            as info:
        simulate_overlaps(model, hp, dim=D_EQ, seeds=[7, 8], times=[0.0, 0.05], init=init)
    assert "\n" not in str(info.value)


def test_bad_arguments():
    model, hp = _demo()
    with pytest.raises(HeadflowError, match="D >= N"):
        simulate_overlaps(model, hp, dim=10, seeds=[0], times=[0.0, 1.0])
    with pytest.raises(HeadflowError, match="save times >= 0"):
        simulate_overlaps(model, hp, dim=D_EQ, seeds=[0], times=[-1.0, 1.0])


# -- [sim] space = "overlaps": the configured entry points ---------------------------------------

_TINY_CFG = ["sim.dim=60", "sim.seeds=3", "training.t_max=0.5", "output.n_save=4",
             "sim.risk_samples=256"]


def test_config_space_dispatch_is_the_chain():
    """`run_sgd` with `sim.space = "overlaps"` is `simulate_overlaps` of the configured model,
    step sizes, seeds and initialization, bit for bit, with the same `sgd.npz` keys and shapes
    as the weight-space run."""
    from headflow.dynamics import load_config

    cfg = load_config(None, [*_TINY_CFG, "sim.space=overlaps"])
    res = sims.run_sgd(cfg)
    tr = cfg.training
    direct = simulate_overlaps(cfg.build_model(), StepSizes.from_config(tr), dim=60,
                               seeds=[0, 1, 2], times=cfg.save_times(),
                               init_std=(tr.init_key_std, tr.init_value_std, tr.init_bias))
    for name, x in direct.arrays().items():
        np.testing.assert_array_equal(res.arrays()[name], x, err_msg=name)
    weights = sims.run_sgd(cfg.replace(**{"sim.space": "weights"})).arrays()
    got = res.arrays()
    assert set(got) == set(weights)
    for name in got:
        assert got[name].shape == weights[name].shape, name
    np.testing.assert_array_equal(got["steps"], weights["steps"])


def test_config_space_start_state():
    """`start` overlaps are the t = 0 state of every seed in overlap space (exactly), and of
    the weights built from them in weight space (to round-off of float64 weights)."""
    from headflow.dynamics import load_config

    cfg = load_config(None, [*_TINY_CFG, "sim.dtype=float64"])
    model = cfg.build_model()
    start = random_start(model, jr.key(3), 500, key_std=0.5, value_std=0.5, bias=0.1)
    for space, tol in (("overlaps", 0.0), ("weights", 1e-12)):
        res = sims.run_sgd(cfg.replace(**{"sim.space": space}), start=start)
        for name, x in start.arrays().items():
            np.testing.assert_allclose(res.arrays()[name][:, 0],
                                       np.broadcast_to(x, (3, *np.shape(x))), atol=tol,
                                       err_msg=f"{space}: {name}")


def test_cli_overlap_space(tmp_path, capsys):
    """`headflow sgd --set sim.space=overlaps`: the same `sgd.npz` contract, float64 recorded
    in `meta.json`; a D below `N + B·L + 1` is a one-line error before anything is written."""
    import json

    from headflow.validation.cli import main

    sets = [a for kv in _TINY_CFG for a in ("--set", kv)]
    out = tmp_path / "o"
    assert main(["sgd", *sets, "--set", "sim.space=overlaps", "--out", str(out)]) == 0
    with np.load(out / "sgd.npz") as z:
        assert {"t", "steps", "risk", "risk_err", "m", "q", "n", "s", "b", "seeds"} <= set(z)
        assert z["m"].shape == (3, 4, 2, 1)
    assert json.loads((out / "meta.json").read_text())["dtype"] == "float64"
    capsys.readouterr()
    bad = tmp_path / "bad"
    assert main(["sgd", *sets, "--set", "sim.space=overlaps", "--set", "sim.dim=10",
                 "--out", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("headflow: error: sim.dim = 10") and "\n" not in err
    assert not bad.exists()


@pytest.mark.slow
def test_escape_times_at_large_dimension():
    """`headflow escape`'s SGD side in overlap space reaches D = 10⁵ in seconds: every run
    escapes from the plateau of `validation/configs/escape.toml`, later at larger D (the
    measured slope in ln D is about 0.64, `docs/overlap-sgd.md#finite-size-studies`)."""
    import tomllib
    from importlib import resources

    from headflow.dynamics import Config
    from headflow.validation.experiments.escape import sgd_escape_times

    text = resources.files("headflow.validation").joinpath("configs/escape.toml").read_text()
    cfg = Config.from_dict(tomllib.loads(text)).replace(**{"sim.space": "overlaps"})
    with optimized():                       # run time, not compile time, dominates
        times, _ = sgd_escape_times(cfg, [1000, 100_000], 8)
    assert np.all(np.isfinite(times)), times
    diff = times[1].mean() - times[0].mean()
    se = np.sqrt(times[0].var(ddof=1) / 8 + times[1].var(ddof=1) / 8)
    assert diff > 3 * se, (times, diff, se)
