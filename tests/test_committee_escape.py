"""Linear stability of the committee machine's symmetric plateau (docs/committee.md): the
unit-difference modes (`headflow.dynamics.analysis.UnitModes`), the tangent-linear propagator of the
generic analysis along the symmetric trajectory against the full nonlinear ODE, and the
parameter-free escape times it predicts (`∫λ = ½ ln D + c`, slope `1/(2λ)` in ln D), at a
small size (K = M = 2, erf, closed-form field)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from _util import optimized
from headflow.dynamics import analysis as an
from headflow.dynamics import load_config
from headflow.dynamics.ode import Integrator, build, integrate

pytestmark = pytest.mark.fast_compile

CONFIG = ["model.kind='committee'", "model.K=2", "model.M=2", "model.activation='erf'",
          "training.lr=1.0", "training.t_max=60.0"]


def _problem(extra=()):
    cfg = load_config(None, [*CONFIG, *extra])
    return build(cfg)


def test_unit_modes_project_and_are_invariant():
    """`unit_average` is an orthogonal projector on the moving coordinates; the difference
    modes are orthonormal, orthogonal to its image and span its complement (K = 3, M = 2,
    second layer trained: 3 + 2·… modes); the closed-form field maps a symmetric state to a
    symmetric velocity (the plateau subspace is invariant) to round-off."""
    p = _problem(["model.K=3", "model.train_second_layer=true", "model.noise=0.1"])
    model = p.model
    modes = an.UnitModes.build(model)
    U = np.asarray(modes.differences)
    np.testing.assert_allclose(U.T @ U, np.eye(modes.mu), atol=1e-13)
    # K = 3, M = 2: Q diagonal (2) and off-diagonal (2) contrasts, R (2 per teacher: 4), v (2)
    assert modes.mu == 10
    x = model.initial_state(jr.key(0), 40)
    px = modes.average(x)
    f = lambda s: np.asarray(modes.flatten(s))                        # noqa: E731
    np.testing.assert_allclose(f(modes.average(px)), f(px), atol=1e-15)
    assert np.abs(U.T @ f(px)).max() < 1e-13                          # image ⟂ differences
    # x − P x lies in the span of the differences (T and A untouched)
    d = f(x) - f(px)
    np.testing.assert_allclose(U @ (U.T @ d), d, atol=1e-13)
    v = p.field(0.0, px)
    assert np.abs(U.T @ f(v)).max() < 1e-14 * max(1.0, np.abs(f(v)).max())


@pytest.mark.slow
def test_tangent_linear_matches_nonlinear_committee():
    """A small unit-difference perturbation of the symmetric start, integrated with the full
    nonlinear ODE, follows the tangent-linear propagator (relative deviation below 1%) while
    it grows along the plateau."""
    p = _problem(["training.t_max=40.0"])
    model, field = p.model, p.field
    modes = an.UnitModes.build(model)
    ts = np.linspace(0.0, 40.0, 21)
    tight = Integrator.adaptive(rtol=1e-10, atol=1e-13, max_steps=20000, blowup=None)
    res = an.linear_stability(field, model.limit_state(), ts, modes=modes, integrator=tight)
    x = np.array(jr.normal(jr.key(5), (modes.mu,)))
    x /= np.linalg.norm(x)
    eps = 1e-6
    U = np.asarray(modes.differences)
    s0 = model.limit_state()
    start = modes.unflatten(modes.flatten(s0) + jnp.asarray(eps * U @ x))
    sol = integrate(field, start, ts, tight)
    flat = jax.vmap(modes.flatten)
    diff = np.asarray(flat(sol.overlaps)) - np.asarray(flat(res.symmetric))
    got = diff @ U / eps
    want = np.einsum("tij,j->ti", np.asarray(res.propagator), x)
    growth = np.linalg.norm(want, axis=1)
    rel = np.linalg.norm(got - want, axis=1) / growth
    print(f"committee tangent-linear vs nonlinear: max relative deviation {rel.max():.2e}, "
          f"growth x{growth[-1]:.2f}")
    assert rel.max() < 1e-2, rel
    assert growth[-1] > 1.5


@pytest.mark.slow
def test_parameter_free_escape_slope():
    """The parameter-free escape times of the plateau (linear spread of random starts, no
    fitted constant) grow with ln D, and their slope between D and 4D is `ln 4 / (2 λ̄)` with
    `λ̄` the mean growth rate of the median linear spread between the two escapes (the
    definition `∫λ = ½ ln D + c`, to the save grid's interpolation)."""
    p = _problem(["training.t_max=200.0"])
    model, field = p.model, p.field
    modes = an.UnitModes.build(model)
    ts = np.linspace(0.0, 200.0, 201)
    res = an.linear_stability(field, model.limit_state(), ts, modes=modes)
    lam = np.asarray(res.growth_rate)
    assert np.all(lam[20:] > 0)                                     # the plateau is unstable
    coef = an.initial_contrasts(model, jr.key(0), modes, n=128, dim=4096)
    spread = an.linear_spread(res, modes, coef)
    dims = np.array([500.0, 2000.0])
    pred = an.predicted_escape_times(res, modes, coef, dims, 0.2)
    med = np.nanmedian(pred, axis=0)
    assert np.isfinite(med).all() and med[1] > med[0]
    logm = np.log(np.median(spread, axis=0))
    t0, t1 = np.interp([np.log(0.2) + 0.5 * np.log(dims[0]),
                        np.log(0.2) + 0.5 * np.log(dims[1])], logm, ts)
    rate = (np.interp(t1, ts, logm) - np.interp(t0, ts, logm)) / (t1 - t0)
    print(f"committee parameter-free escapes at D = 500, 2000: {med}, slope "
          f"{(med[1] - med[0]) / np.log(4):.2f}, 1/(2 λ̄) = {1 / (2 * rate):.2f}, "
          f"instantaneous λ at the escapes {np.interp(med, ts, lam)}")
    assert (med[1] - med[0]) / np.log(4) == pytest.approx(1 / (2 * rate), rel=0.1)
    # the eigenvalue along the plateau is of the size of the spread's growth rate
    assert np.all(np.abs(np.interp(med, ts, lam) - rate) < 0.5 * rate)


@pytest.mark.slow
def test_escape_distributions_sde_and_sgd(tmp_path):
    """The escape-time samples of SDE paths and overlap-space SGD at D = 400, 64 runs each, and
    of 16 weight-space SGD runs (each costs O(D) a step; the two spaces are compared in law in
    `tests/test_committee_sgd.py`): every run escapes (at t = 0 where the random start is
    already past the threshold), the samples are independent (no two equal), the KS statistic
    is the largest CDF gap of the two samples (recomputed here), and the verdicts are the
    expected ones: the SDE's escape times agree with the overlap chain's (resolved at this size:
    the KS distance's upper bound is below its tolerance), and no pair disagrees (the three are
    one law to the resolution of these runs; the pairs with weight-space SGD are not decided at
    16 runs). A wrong SDE noise or a wrong chain step makes the KS verdict disagree."""
    from headflow.validation.experiments.escape import escape_distributions
    from headflow.validation.verdicts import AGREE, DISAGREE, NOT_RESOLVED

    cfg = load_config(None, [*CONFIG, "training.t_max=120.0", "output.n_save=61",
                             "sim.dim=400", "sde.dt=0.5", "sde.samples_noise=256"])
    with optimized():                   # hundreds of runs: run time, not compile time, counts
        out = escape_distributions(cfg, 400, 64, weight_runs=16)
    assert out["runs"] == {"sde": 64, "weights": 16, "overlaps": 64}
    for name in ("sde", "weights", "overlaps"):
        e = out["times"][name]
        assert e.shape == (out["runs"][name],) and (e[np.isfinite(e)] >= 0).all()
        assert np.isfinite(e).sum() >= len(e) - 4, name         # a few censored at most
        escaped = e[np.isfinite(e) & (e > 0)]
        assert len(np.unique(escaped)) == len(escaped)
    a, b = out["times"]["sde"], out["times"]["weights"]
    x = np.concatenate([a, b])
    gap = np.max(np.abs((a[:, None] <= x).mean(0) - (b[:, None] <= x).mean(0)))
    v = out["verdicts"]["sde_vs_weights"]
    assert v["ks"]["statistic"] == pytest.approx(gap)
    print({k: s["mean"] for k, s in out["stats"].items()},
          {p: (v["ks"]["phrase"], v["spread"]["phrase"]) for p, v in out["verdicts"].items()})
    assert out["verdicts"]["sde_vs_overlaps"]["ks"]["word"] == AGREE
    words = {w for pair in out["verdicts"].values() for w in (pair["ks"]["word"],
                                                             pair["spread"]["word"])}
    assert DISAGREE not in words
    assert out["overall"] == NOT_RESOLVED          # the undecided pairs keep the whole open


def test_escape_distributions_refuses_bad_counts():
    """No path, or a negative number of weight-space seeds: one error before anything runs."""
    from headflow.dynamics import ConfigError
    from headflow.validation.experiments.escape import escape_distributions

    cfg = load_config(None, [*CONFIG, "sim.dim=400"])
    for runs, weight_runs in ((0, None), (4, -1)):
        with pytest.raises(ConfigError, match="escape_distributions"):
            escape_distributions(cfg, 400, runs, weight_runs=weight_runs)
