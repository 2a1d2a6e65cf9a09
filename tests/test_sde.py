"""The diffusion (SDE) limit of the overlaps (issue 12, `docs/sde.md`): the diffusion matrix
against one-step SGD, its structure, the drift of the same increments, reproducibility, and a
small ensemble against the exact overlap chain."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from _util import Z, make_model

import headflow.dynamics as d
from headflow.dynamics import StepSizes
from headflow.dynamics.expectations import MonteCarlo
from headflow.dynamics.models.attention import FullField, SampledFullField
from headflow.dynamics.priors import Discrete, FlippedSpike, Gaussian
from headflow.dynamics.sde import centred_factor, run_sde
from headflow.dynamics.models.attention import (Diffusion, entry_names, flatten, increments,
                                                n_entries, unflatten)
from headflow.dynamics.models.attention._chain import (ChainState, apply_step, draw_steps,
                                                      expand_overlaps, reduce_overlaps)

D = 2000
STEPS = StepSizes(lr=0.8, lr_bias=1.5, weight_decay=0.2, batch=2)


from _util import off_manifold_state as _state  # noqa: E402


def _model(activation: str, prior=None) -> d.Model:
    return make_model(activation, L=3, H=2, noise=0.3,
                      prior=FlippedSpike(2.0, 0.7, [1.0]) if prior is None else prior)


_matrix = eqx.filter_jit(lambda diff, ov: diff.matrix(ov))


# -- the layout of the state ---------------------------------------------------------------------

def test_flatten_round_trip_and_names():
    ov = _state(False)
    y = flatten(ov)
    assert y.shape == (n_entries(2, 1),) == (len(entry_names(2, 1)),)
    back = unflatten(y, 2, 1)
    for name in d.ORDER_PARAMETERS + d.CROSS_OVERLAPS:
        np.testing.assert_array_equal(np.asarray(getattr(back, name)),
                                      np.asarray(getattr(ov, name)))
    names = entry_names(2, 1)
    assert names[0] == "k1·k1" and names[-1] == "b2" and "k1·v*" in names


# -- (a) Σ against the covariance of one-step SGD increments --------------------------------------

@eqx.filter_jit
def _chain_increments(model, hp, ov, key, n: int):
    """`D × (one-step change)` of the flattened state for `n` independent steps of the exact
    overlap chain from the same state `ov` (float64, exact in law at dimension D)."""
    omega, b = reduce_overlaps(model, ov)
    state = ChainState.start(omega, b)
    draws = draw_steps(model, hp, D, key, n)
    y0 = flatten(ov)

    def one(dr):
        new = apply_step(model, hp, D, state, dr, jnp.array(0))
        return D * (flatten(expand_overlaps(model, new.omega, new.b)) - y0)

    return jax.lax.map(one, draws, batch_size=4096)


def _batched_cov(x: np.ndarray, batches: int) -> tuple[np.ndarray, np.ndarray]:
    """The covariance of the rows of `x` and its standard error from `batches` equal batches."""
    covs = np.stack([np.cov(c, rowvar=False) for c in np.array_split(x, batches)])
    return np.cov(x, rowvar=False), covs.std(0, ddof=1) / np.sqrt(batches)


@pytest.mark.slow
@pytest.mark.parametrize("on_manifold,activation", [
    (False, "softmax"), (False, "softmax1"), (False, "bayes_softmax"),
    (True, "softmax1")])   # the state on the manifold: the same code, once
def test_sigma_equals_one_step_covariance(activation, on_manifold):
    """Σ (the covariance of the per-sample increment, over the nodes) equals the covariance of
    `D ΔΩ` over independent one-step SGD transitions of the exact overlap chain at D = 2000,
    entrywise within |z| ≤ 5 (error bars: 32 batches of the 2¹⁶ SGD steps, 16 independent
    node sets of Σ). Batch 2, weight decay and label noise on; on the manifold the noise still
    excites the cross overlaps."""
    model = _model(activation)
    ov = _state(on_manifold)
    hp = StepSizes(lr=jnp.float64(0.8), lr_bias=jnp.float64(1.5),
                   weight_decay=jnp.float64(0.2), batch=2)
    x = np.asarray(_chain_increments(model, hp, ov, jr.key(7), 1 << 16))
    emp, emp_se = _batched_cov(x, 32)
    sig = np.stack([np.asarray(_matrix(Diffusion.build(model, STEPS, MonteCarlo(4096, seed=s)),
                                       ov)) for s in range(16)])
    theory, theory_se = sig.mean(0), sig.std(0, ddof=1) / 4.0
    err = np.sqrt(emp_se**2 + theory_se**2)
    diff = emp - theory
    z = np.where(np.abs(diff) < 1e-12, 0.0, diff / np.maximum(err, 1e-300))
    worst = np.unravel_index(np.argmax(np.abs(z)), z.shape)
    names = entry_names(2, 1)
    print(f"{activation}, {'on' if on_manifold else 'off'} the manifold: max |z| = "
          f"{np.abs(z).max():.2f} over {z.shape[0] * (z.shape[0] + 1) // 2} entries, largest "
          f"|Σ|/error = {np.max(np.abs(theory) / (err + 1e-30)):.0f}")
    assert np.abs(z).max() <= Z, (f"{activation}: Σ[{names[worst[0]]}, {names[worst[1]]}] "
                                  f"= {theory[worst]:.5g}, SGD {emp[worst]:.5g} (z = "
                                  f"{z[worst]:.1f})")
    assert np.max(np.abs(emp) / (err + 1e-30)) > 50, "increments too small to test anything"
    if activation == "softmax":          # the bias cancels: its row of Σ is exactly zero
        np.testing.assert_array_equal(theory[-2:], 0.0)


# -- (b) structure: symmetric PSD, the factor, the mixture over θ ---------------------------------

@pytest.mark.parametrize("prior", ["flipped_spike", "discrete_3", "gaussian"])
def test_sigma_is_the_mixture_covariance(prior):
    """`B Bᵀ` equals `Σ_{is} w_is U_is U_isᵀ − Ū Ūᵀ` written out (θ summed inside each node,
    node average outside), and the `eigh` square root squares to it; Σ is symmetric PSD."""
    pr = {"flipped_spike": lambda: FlippedSpike(2.0, 0.7, [1.0]),
          "discrete_3": lambda: Discrete([[1.5], [-1.0], [0.3]], [0.3, 0.5, 0.2]),
          "gaussian": lambda: Gaussian([0.8], [2.0])}[prior]()
    model = _model("bayes_softmax", pr)
    ov = _state(False)
    diff = Diffusion.build(model, STEPS, MonteCarlo(512, seed=1))
    U, w = (np.asarray(a) for a in eqx.filter_jit(increments)(model, STEPS, ov, diff.nodes))
    assert U.shape[1] == (3 if prior == "discrete_3" else 2 if prior == "flipped_spike" else 1)
    np.testing.assert_allclose(w.sum(), 1.0, rtol=1e-12)
    mean = np.einsum("is,isp->p", w, U)
    second = np.einsum("is,isp,isq->pq", w, U, U)
    want = (second - np.outer(mean, mean)) / STEPS.batch
    sigma = np.asarray(_matrix(diff, ov))
    scale = np.abs(want).max()
    np.testing.assert_allclose(sigma, want, atol=1e-12 * scale)
    np.testing.assert_array_equal(sigma, sigma.T)
    assert np.linalg.eigvalsh(sigma)[0] >= -1e-12 * scale
    root = np.asarray(eqx.filter_jit(lambda f, o: f.sqrt_factor(o))(diff, ov))
    np.testing.assert_allclose(root @ root.T, sigma, atol=1e-10 * scale)
    B = np.asarray(centred_factor(jnp.asarray(U), jnp.asarray(w)))
    assert B.shape == (n_entries(2, 1), U.shape[0] * U.shape[1])


# -- (c) the drift of the same increments ----------------------------------------------------------

@pytest.mark.parametrize("on_manifold", [True, False])
def test_increment_mean_is_the_drift(on_manifold):
    """The mean of the per-sample increments is `SampledFullField` (the same code, to
    round-off) and agrees with the analytic-value `FullField` within Monte Carlo error."""
    model = _model("softmax1")
    ov = _state(on_manifold)
    be = MonteCarlo(1 << 14, seed=3)
    diff = Diffusion.build(model, STEPS, be)
    mean = np.asarray(eqx.filter_jit(lambda f, o: f.drift(o))(diff, ov))
    sampled, err = eqx.filter_jit(lambda f, o: f.with_error(o))(
        SampledFullField.build(model, STEPS, be), ov)
    np.testing.assert_allclose(mean, np.asarray(flatten(sampled)), atol=1e-12)
    full = flatten(eqx.filter_jit(lambda f, o: f(0.0, o))(
        FullField.build(model, STEPS, MonteCarlo(1 << 16, seed=9)), ov))
    z = (mean - np.asarray(full)) / np.asarray(flatten(err))
    assert np.abs(z).max() < Z, z


# -- the solvers ----------------------------------------------------------------------------------

def test_step_increments_are_a_brownian_motion_in_law():
    """`StepIncrements` on an uneven grid: each step's increment is `N(0, h I)` (mean and
    variance within their sampling error), the steps and the coordinates are uncorrelated, a
    backward query is minus the forward one, and the same key gives the same increments."""
    from headflow.dynamics.sde import StepIncrements, step_grid

    grid = jnp.asarray(step_grid(np.array([0.0, 0.3, 1.0]), 0.25))   # steps 0.15 ×2, 0.233 ×3
    h = np.diff(np.asarray(grid))
    n, size = 4000, 2

    def increments(key):
        path = StepIncrements().path(key, grid, size)
        return jax.vmap(path.evaluate)(grid[:-1], grid[1:])          # (steps, size)

    dw = np.asarray(jax.jit(jax.vmap(increments))(jr.split(jr.key(3), n)))
    z = dw / np.sqrt(h)[None, :, None]                               # N(0, 1) if exact
    assert np.all(np.abs(z.mean(axis=0)) < 4 / np.sqrt(n))
    assert np.all(np.abs(z.var(axis=0) - 1) < 4 * np.sqrt(2 / n))
    corr = np.corrcoef(z.reshape(n, -1), rowvar=False)
    assert np.max(np.abs(corr - np.eye(corr.shape[0]))) < 4.5 / np.sqrt(n)
    path = StepIncrements().path(jr.key(3), grid, size)
    np.testing.assert_array_equal(path.evaluate(grid[3], grid[2]), -path.evaluate(grid[2], grid[3]))
    np.testing.assert_array_equal(increments(jr.key(3)), increments(jr.key(3)))


@pytest.mark.parametrize("brownian", ["increments", "tree"])
@pytest.mark.parametrize("name", ["euler", "drift_heun"])
def test_solvers_converge_to_the_ito_solution(name, brownian):
    """`dy = y dW` (Itô): `E y(1) = y(0)` and `Var y(1) = e − 1`; a Stratonovich solver would
    give `E y(1) = e^{1/2}`. And `dy = −y dt`: Heun's drift is second order, Euler's first. With
    either Brownian motion on the fixed step grid."""
    import diffrax as dfx

    from headflow.dynamics.sde import get_brownian, get_sde_solver, step_grid

    solver = get_sde_solver(name)

    def y_at_one(key, drift, noise, dt):
        grid = step_grid(np.array([0.0, 1.0]), dt)
        bm = get_brownian(brownian, grid).path(key, jnp.asarray(grid), 1)
        terms = dfx.MultiTerm(dfx.ODETerm(drift), dfx.ControlTerm(noise, bm))
        return dfx.diffeqsolve(terms, solver, 0.0, 1.0, None, jnp.ones(1),
                               stepsize_controller=dfx.StepTo(ts=jnp.asarray(grid))).ys[-1, 0]

    keys = jr.split(jr.key(0), 1000)
    ys = np.asarray(jax.jit(jax.vmap(lambda k: y_at_one(
        k, lambda t, y, a: 0.0 * y, lambda t, y, a: y[:, None], 0.1)))(keys))
    assert abs(ys.mean() - 1.0) < 4 * ys.std() / np.sqrt(len(ys)), ys.mean()
    # Var y(1) = e − 1 in the limit; Euler–Maruyama's at h = 0.1 is (1 + h)^10 − 1 exactly
    var, n = ys.var(), len(ys)
    assert abs(var - (1.1 ** 10 - 1)) < 4 * var * np.sqrt((np.mean((ys - ys.mean()) ** 4)
                                                           / var ** 2 - 1) / n), var
    y = float(y_at_one(keys[0], lambda t, y, a: -y, lambda t, y, a: 0.0 * y[:, None], 0.1))
    err = abs(y - np.exp(-1.0))
    assert err < (1e-3 if name == "drift_heun" else 3e-2) and err > (1e-4 if name ==
                                                                     "drift_heun" else 1e-2)


# -- (b, d) paths: reproducibility, Σ along them ---------------------------------------------------

def _small_cfg(**extra) -> d.Config:
    sets = {"model.L": 3, "model.H": 2, "model.noise": 0.1, "prior.amplitude": 2.5,
            "prior.p": 0.65, "training.lr": 0.8, "training.lr_bias": 0.8, "training.t_max": 2.0,
            "output.n_save": 5, "sde.dt": 0.25, "sde.samples_drift": 512,
            "sde.samples_noise": 128, "sim.risk_samples": 1024, "ode.samples": 512, **extra}
    return d.Config().replace(**sets)


@pytest.fixture(scope="module")
def small_run():
    return run_sde(_small_cfg(), dim=300, paths=4)


def test_same_seed_same_paths_other_seed_other_paths(small_run):
    again = run_sde(_small_cfg(), dim=300, paths=4)
    for name in ("m", "q", "s", "kv", "b"):
        np.testing.assert_array_equal(np.asarray(getattr(again.overlaps, name)),
                                      np.asarray(getattr(small_run.overlaps, name)))
    other = run_sde(_small_cfg(**{"sde.seed": 1}), dim=300, paths=4)
    assert not np.allclose(np.asarray(other.overlaps.q[:, -1]),
                           np.asarray(small_run.overlaps.q[:, -1]))
    # the paths differ from each other, and from their own start
    q = np.asarray(small_run.overlaps.q)
    assert np.std(q[:, -1, 0, 0]) > 0 and not np.allclose(q[:, 0], q[:, -1])


def test_sigma_psd_along_paths(small_run):
    """Σ at every saved state of every path is symmetric PSD (eigenvalues ≥ −round-off), and
    every saved state is in the domain."""
    assert small_run.paths_valid.all()
    cfg = _small_cfg()
    diff = Diffusion.build(cfg.build_model(), StepSizes.from_config(cfg.training),
                           MonteCarlo(256, seed=0))
    states = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), small_run.overlaps)
    sig = np.asarray(eqx.filter_jit(lambda f, o: jax.lax.map(f.matrix, o))(diff, states))
    for s in sig:
        np.testing.assert_array_equal(s, s.T)
        assert np.linalg.eigvalsh(s)[0] >= -1e-12 * np.abs(s).max()


def test_paths_start_from_the_finite_d_law(small_run):
    """Each path starts from its own random initialization at D: `q_11 ≈ σ_k²` with a spread
    of order `σ_k² √(2/D)` and head differences of order `1/√D`."""
    q0 = np.asarray(small_run.overlaps.q[:, 0, 0, 0])
    assert np.all(np.abs(q0 - 0.01) < 0.01 * 6 * np.sqrt(2 / 300))
    assert len(np.unique(q0)) == len(q0)


def test_frozen_values_gaussian_prior():
    """With frozen values the value rows neither drift nor diffuse (n = ρ*, s = ρ* 11ᵀ stay
    exactly) and `kv_hh' = kvs_h` holds along the paths (the state stays a Gram matrix), with a
    Gaussian prior (one θ per node)."""
    cfg = _small_cfg(**{"model.train_values": False, "model.rho": 1.5,
                        "training.t_max": 1.0, "output.n_save": 3})
    cfg = cfg.replace(**{"prior.kind": "gaussian", "prior.mean": [0.5], "prior.var": [2.0]})
    res = run_sde(cfg, dim=300, paths=2)
    assert res.paths_valid.all() and res.info["brownian_dim"] == 128   # one θ per node
    for name in ("n", "s"):             # constant in time, at ρ* (their value at D)
        v = np.asarray(getattr(res.overlaps, name))
        np.testing.assert_array_equal(v, np.broadcast_to(v[:, :1], v.shape))
        np.testing.assert_allclose(v, 1.5, rtol=1e-12)
    kv, kvs = np.asarray(res.overlaps.kv), np.asarray(res.overlaps.kvs)   # v_h = v*
    np.testing.assert_array_equal(kv, np.broadcast_to(kvs[..., None], kv.shape))
    q = np.asarray(res.overlaps.q)
    assert not np.allclose(q[:, 0], q[:, -1])


# -- (f) a small ensemble against the exact overlap chain -----------------------------------------

@pytest.mark.slow
def test_ensemble_matches_overlap_chain_sgd():
    """At D = 200 the SDE ensemble's mean risk agrees with the seed mean of the exact overlap
    chain within four combined standard errors at every saved time, and the spreads agree
    within 30% averaged over the run (40 paths, 40 seeds, t ≤ 5)."""
    from headflow import sims

    cfg = _small_cfg(**{"training.t_max": 5.0, "output.n_save": 6, "sde.dt": 0.2,
                        "sde.samples_drift": 512, "sde.samples_noise": 256,
                        "sim.space": "overlaps", "sim.risk_samples": 4096})
    n = 40
    sde = run_sde(cfg, dim=200, paths=n)
    sgd = sims.run_sgd(cfg, dim=200, seeds=n)
    a, b = np.asarray(sde.risk), np.asarray(sgd.risk)
    assert sde.paths_valid.all()
    se = np.sqrt(a.var(0, ddof=1) / n + b.var(0, ddof=1) / n)
    z = (a.mean(0) - b.mean(0)) / se
    assert np.abs(z).max() < 4, (a.mean(0), b.mean(0), z)
    ratio = a.std(0, ddof=1)[1:] / b.std(0, ddof=1)[1:]
    assert abs(np.mean(ratio) - 1) < 0.3, ratio
    assert a.mean(0)[-1] < 0.9 * a.mean(0)[0]          # it learned something


def test_node_counts_come_from_the_error_target():
    """Without `samples_drift` / `samples_noise` the node counts follow `[sde] error_target`
    `τ`, not `[ode] samples`: the noise count is the smallest power of two with
    `1/√(2n) ≤ τ` (the relative error of a spread estimated from n Monte Carlo draws, checked
    here by sampling), the drift's four times it; explicit counts are kept."""
    from headflow.dynamics.expectations import MIN_SAMPLES
    from headflow.dynamics.sde import build_sde, drift_samples, noise_samples

    cfg = d.load_config(None, ["ode.samples=65536"])            # no [sde] node keys
    assert (drift_samples(cfg), noise_samples(cfg)) == (1024, 256)
    assert build_sde(cfg, 1000).diffusion.nodes.x.shape[0] == 256      # the diffusion's nodes
    for tau in (0.3, 0.1, 0.05, 0.02, 0.01):
        c = d.load_config(None, [f"sde.error_target={tau}"])
        n = noise_samples(c)
        assert n & (n - 1) == 0 and 1 / np.sqrt(2 * n) <= tau
        assert n == MIN_SAMPLES or 1 / np.sqrt(n) > tau         # n/2 nodes would miss it
        assert drift_samples(c) == 4 * n
    c = d.load_config(None, ["sde.samples_drift=2048", "sde.samples_noise=64"])
    assert (drift_samples(c), noise_samples(c)) == (2048, 64)
    # the premise: the standard deviation of n Gaussian draws has relative error 1/√(2n)
    rng = np.random.default_rng(0)
    for n in (64, 256):
        s = rng.standard_normal((4000, n)).std(axis=1, ddof=1)
        np.testing.assert_allclose(s.std(), 1 / np.sqrt(2 * n), rtol=0.06)
