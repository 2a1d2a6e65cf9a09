"""The numeric ODE engine: forms, backends, invariants, integration and its errors."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import headflow.dynamics as d
from _util import ACTIVATIONS

from headflow.dynamics import StepSizes
from headflow.dynamics.models.attention import FullField, ManifoldField, SampledFullField
from headflow.dynamics.ode import Integrator, integrate, run_ode
from headflow.dynamics.models.attention import random_start, symmetric_start

_with_error = eqx.filter_jit(lambda field, ov: field.with_error(ov))


def _model(activation="bayes_softmax", L=3, H=2, prior=None, noise=0.2):
    prior = d.priors.FlippedSpike(2.0, 0.7, [1.0, 0.0]) if prior is None else prior
    return d.Model(L=L, H=H, F=prior.F, activation=d.activations.get_activation(activation),
                   prior=prior, noise=noise, rho=1.0)


def _small(noise=0.2):
    """L = 2, one head, F = 1: the model that compiles fastest, for the tests of the
    integrator's plumbing and errors, where the model does not enter what is checked (with
    `_state(H=1, F=1)`)."""
    return _model(L=2, H=1, prior=d.priors.FlippedSpike(2.0, 0.7, [1.0]), noise=noise)


def _state(H=2, F=2, seed=0):
    k = jr.split(jr.key(seed), 3)
    K = jr.normal(k[0], (H, 8)) / 2
    V = jr.normal(k[1], (H, 8)) / 2
    T = jnp.linalg.qr(jr.normal(k[2], (8, F + 1)))[0].T   # orthonormal teacher rows
    return d.Overlaps.manifold(m=K @ T[:F].T, q=K @ K.T, n=V @ T[F], s=V @ V.T,
                               b=jnp.linspace(-0.3, 0.3, H))


def _z(a, ea, b, eb):
    return np.max(np.abs(np.asarray(a) - np.asarray(b))
                  / np.sqrt(np.asarray(ea) ** 2 + np.asarray(eb) ** 2 + 1e-30))


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_full_and_manifold_forms_agree_on_the_manifold(activation):
    """On the manifold the analytic full form is the manifold form, node by node (to
    round-off), cross overlaps exactly zero; the sampled full form agrees within its error."""
    model = _model(activation)
    ov = _state()
    hp = StepSizes(lr=0.7, lr_bias=1.2, weight_decay=0.1, batch=1)
    be = d.expectations.MonteCarlo(samples=1 << 12, seed=3)
    mf, ff = ManifoldField.build(model, hp, be), FullField.build(model, hp, be)
    r1, e1 = _with_error(mf, ov)
    r2, e2 = _with_error(ff, ov)
    for name in d.ORDER_PARAMETERS:
        np.testing.assert_allclose(getattr(r2, name), getattr(r1, name), rtol=1e-11,
                                   atol=1e-13, err_msg=name)
    for name in d.CROSS_OVERLAPS:
        assert np.max(np.abs(np.asarray(getattr(r2, name)))) < 1e-14, name
    sf = SampledFullField.build(model, hp, d.expectations.MonteCarlo(samples=1 << 15, seed=4))
    r3, e3 = _with_error(sf, ov)
    for name in d.ORDER_PARAMETERS + d.CROSS_OVERLAPS:
        assert _z(getattr(r2, name), getattr(e2, name), getattr(r3, name),
                  getattr(e3, name)) < 5, name


def _off_manifold():
    return d.Overlaps(m=jnp.array([[0.6], [-0.4]]), q=jnp.array([[1.2, 0.3], [0.3, 0.9]]),
                      n=jnp.array([0.5, 0.3]), s=jnp.array([[0.7, 0.1], [0.1, 0.5]]),
                      b=jnp.array([0.3, -0.2]), kv=jnp.array([[0.2, -0.1], [0.05, 0.15]]),
                      kvs=jnp.array([0.1, -0.15]), vks=jnp.array([[0.2], [-0.1]]))


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_analytic_value_integrals_equal_sampled_ones_off_the_manifold(activation):
    """Off the manifold (every cross overlap O(1)), the full form with the value side
    integrated exactly equals the one with every field sampled, within their Monte Carlo errors
    (|z| ≤ 5 per entry), with the η² terms, weight decay, batch and label noise on; and at equal
    nodes its error is smaller."""
    model = d.Model(L=3, H=2, activation=d.activations.get_activation(activation),
                    prior=d.priors.FlippedSpike(2.0, 0.7, [1.0]), noise=0.3, rho=1.0)
    hp = StepSizes(lr=0.8, lr_bias=1.5, weight_decay=0.2, batch=2)
    ov = _off_manifold()
    ra, ea = _with_error(FullField.build(model, hp, d.expectations.MonteCarlo(1 << 13, 1)), ov)
    rs, es = _with_error(SampledFullField.build(model, hp, d.expectations.MonteCarlo(1 << 15, 2)),
                         ov)
    ratio = []
    for name in d.ORDER_PARAMETERS + d.CROSS_OVERLAPS:
        assert _z(getattr(ra, name), getattr(ea, name), getattr(rs, name),
                  getattr(es, name)) < 5, name
        ratio.append(np.median(np.asarray(getattr(es, name)) * 2.0
                               / np.maximum(np.asarray(getattr(ea, name)), 1e-300)))
    assert np.median(ratio) > 1.5, ratio          # same node count: a smaller error


@pytest.mark.parametrize("field_cls", [FullField, ManifoldField, SampledFullField])
def test_batched_field_changes_only_the_summation_order(field_cls):
    """`batched(n)` cuts the node sum into chunks of `chunk // n` nodes for `n` states
    evaluated at once: under `vmap` over states it gives every state the field of the unbatched
    field (its nodes in one chunk, summed without a loop) to round-off, with more than one chunk
    (the padded last chunk included)."""
    model = _model(prior=d.priors.FlippedSpike(2.0, 0.7, [1.0]))
    hp = StepSizes(lr=0.7, lr_bias=1.2, weight_decay=0.1, batch=1)
    field = field_cls.build(model, hp, d.expectations.MonteCarlo(samples=500, seed=3))
    n = 5
    batched = field.batched(n)
    assert batched.batch == n and field.batch == 1 and field.batched(0).batch == 1
    assert field.chunk // n < field.nodes.x.shape[0] < field.chunk   # several chunks, padded
    base = _off_manifold() if not field_cls.manifold_form else _state(F=1)
    states = jax.tree.map(lambda x: jnp.stack([x * (1 + 0.05 * i) for i in range(n)]), base)
    want = eqx.filter_jit(jax.vmap(lambda o: field(0.0, o)))(states)
    got = eqx.filter_jit(jax.vmap(lambda o: batched(0.0, o)))(states)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_expectation_backends_agree_within_error_bars(activation):
    model = _model(activation, L=2, H=1, prior=d.priors.FlippedSpike(2.0, 0.7, [1.0]))
    ov = d.Overlaps.manifold(m=jnp.array([[0.8]]), q=jnp.array([[1.5]]), n=jnp.array([0.6]),
                             s=jnp.array([[0.8]]), b=jnp.array([0.1]))
    hp = StepSizes(lr=0.8, lr_bias=1.0)
    results = {}
    for name in ("mc", "qmc", "quadrature", "sparse"):
        be = d.expectations.get_expectation(name, 1 << 14, seed=1)
        f = ManifoldField.build(model, hp, be)
        results[name] = _with_error(f, ov)
    for a in results:
        for b in results:
            if a < b:
                for leaf in ("m", "q", "n", "s", "b"):
                    ra, ea = (getattr(x, leaf) for x in results[a])
                    rb, eb = (getattr(x, leaf) for x in results[b])
                    assert _z(ra, ea, rb, eb) < 4.5, (a, b, leaf)
    # quadrature (4 dims, order 11) is far more accurate than MC at the same budget (the
    # sparse grid's own estimate, from the level below, is not smaller than MC's here)
    assert float(results["quadrature"][1].q.max()) < 0.1 * float(results["mc"][1].q.max())


def test_mc_error_shrinks_like_inverse_sqrt_n():
    model = _model()
    ov = _state()
    errs = []
    for n in (1 << 11, 1 << 13, 1 << 15):
        be = d.expectations.MonteCarlo(samples=n, seed=2)
        f = ManifoldField.build(model, StepSizes(lr=1.0, lr_bias=1.0), be)
        errs.append(float(_with_error(f, ov)[1].q[0, 0]))
    ratios = np.array(errs[:-1]) / np.array(errs[1:])
    np.testing.assert_allclose(ratios, 2.0, rtol=0.15)   # 4× the samples, half the error


def test_zero_predictor_start_gives_delta2_plus_rho():
    model = dataclasses.replace(_model(noise=0.4), rho=1.7)
    ov = d.Overlaps.manifold(m=jnp.array([[0.5, 0.1], [-0.2, 0.3]]), q=jnp.eye(2),
                             n=jnp.zeros(2), s=jnp.zeros((2, 2)), b=jnp.zeros(2))
    r, e = d.population_risk(model, ov, d.expectations.MonteCarlo(samples=4096))
    np.testing.assert_allclose(float(r), 0.4**2 + 1.7, rtol=1e-12)
    assert float(e) < 1e-12


def test_symmetric_and_psd_along_a_trajectory():
    # the grid and nodes of the next test: the two share one compiled solve
    cfg = d.load_config(None, ["training.t_max=40", "output.n_save=9", "ode.samples=2048",
                               "sim.dim=500"])
    res = run_ode(cfg)
    ov = res.overlaps
    for name in ("q", "s"):
        x = np.asarray(getattr(ov, name))
        np.testing.assert_allclose(x, np.swapaxes(x, -1, -2), atol=1e-12)
        assert np.linalg.eigvalsh(x).min() > -1e-9
    # the full Gram matrix (with the teacher) stays PSD too
    model = cfg.build_model()
    gram = jax.vmap(lambda o: o.gram(model.rho))(ov)
    assert np.linalg.eigvalsh(np.asarray(gram)).min() > -1e-9
    assert np.all(np.isfinite(np.asarray(res.risk)))
    assert float(res.risk[-1]) < float(res.risk[0])


def test_symmetric_start_never_specializes():
    cfg = d.load_config(None, ["training.t_max=40", "output.n_save=9", "ode.samples=2048",
                               "ode.init=symmetric"])
    ov = run_ode(cfg).overlaps
    np.testing.assert_allclose(np.asarray(ov.m[:, 0]), np.asarray(ov.m[:, 1]), atol=1e-10)
    np.testing.assert_allclose(np.asarray(ov.b[:, 0]), np.asarray(ov.b[:, 1]), atol=1e-10)


def test_random_start_has_order_inverse_sqrt_d_differences():
    model = _model(H=4)
    spreads = []
    for dim in (400, 6400):
        ovs = [random_start(model, jr.key(i), dim, key_std=0.5, value_std=0.5, bias=0.0)
               for i in range(8)]
        spreads.append(np.mean([np.std(np.asarray(o.m)) for o in ovs]))
    np.testing.assert_allclose(spreads[0] / spreads[1], 4.0, rtol=0.3)


def test_gradient_flow_decreases_the_risk_monotonically():
    cfg = d.load_config(None, ["training.t_max=20", "output.n_save=21", "ode.samples=2048",
                               "ode.sgd_noise=false", "sim.dim=500"])
    r = np.asarray(run_ode(cfg).risk)
    assert np.all(np.diff(r) < 1e-9)


# ---- bad inputs -------------------------------------------------------------------------------

def _field(model, samples=256):
    return ManifoldField.build(model, StepSizes(lr=1.0, lr_bias=1.0),
                               d.expectations.MonteCarlo(samples=samples))


def test_non_psd_initial_overlaps_error():
    model = _model()
    ov = _state()
    bad = dataclasses.replace(ov, m=ov.m * 10.0)        # |m| > √q: not a Gram matrix
    with pytest.raises(d.HeadflowError, match="not a valid Gram matrix"):
        integrate(_field(model), bad, np.linspace(0, 1, 3), Integrator.adaptive())


def test_inconsistent_shapes_error():
    model = _model(H=3)
    with pytest.raises(d.HeadflowError, match=r"shape .* H=3"):
        integrate(_field(model), _state(H=2), np.linspace(0, 1, 3), Integrator.adaptive())


def test_max_steps_error():
    model = _small()
    with pytest.raises(d.HeadflowError, match="max_steps"):
        integrate(_field(model), _state(H=1, F=1), np.linspace(0, 50, 3),
                  Integrator.adaptive(max_steps=3))


def test_nan_vector_field_error():
    model = _small(noise=float("nan"))
    with pytest.raises(d.DivergenceError, match="NaN/inf"):
        integrate(_field(model), _state(H=1, F=1), np.linspace(0, 1, 3), Integrator.adaptive())


def test_divergence_error():
    # the nodes and save grid of test_symmetric_start_never_specializes (its compiled solve
    # serves here) and the dimension of test_gradient_flow_decreases_the_risk_monotonically
    # (its compiled random start)
    cfg = d.load_config(None, ["training.t_max=400", "output.n_save=9", "ode.samples=2048",
                               "training.lr=6.0", "sim.dim=500"])
    with pytest.raises(d.HeadflowError, match="lr|max_steps"):
        run_ode(cfg)


def test_symmetric_start_constructor():
    ov = symmetric_start(_model(H=3), key_std=0.2, value_std=0.3, bias=0.5)
    np.testing.assert_allclose(np.asarray(ov.q), 0.04 * np.eye(3))
    np.testing.assert_allclose(np.asarray(ov.s), 0.09 * np.eye(3))
    np.testing.assert_allclose(np.asarray(ov.b), 0.5)


@pytest.mark.slow
def test_auto_samples_meet_the_error_target_and_rhs_auto_resolves():
    """`[ode] samples = "auto"`: the count is a power of two in [pilot, cap], grows when the
    error target is tightened, and the run reports the pilot's and its own measured field error;
    with the chosen count the measured error is within a factor 2 of the target (the sizing
    assumes the backend's convergence rate). `rhs = "auto"` is the generated code on the
    manifold for a derived activation, autodiff for the full form."""
    from headflow.dynamics.expectations import AUTO_MAX_SAMPLES
    from headflow.dynamics.ode import error_target, sized
    from headflow.dynamics.models.attention import resolved_rhs
    from headflow.dynamics.ode._run import AUTO_PILOT

    # 9 saved states: the pilot run's grid, so the run at the pilot's count reuses its programs
    base = ["training.t_max=2", "output.n_save=9", "model.L=3", "ode.samples=\"auto\"",
            "ode.expectation=\"qmc\""]
    counts = {}
    loose = d.load_config(None, [*base, "ode.error_target=1.0"])
    model = loose.build_model()
    ov0 = d.ode.initial_state(loose, model).on_manifold()
    eps = sized(loose, model, ov0, loose.save_times())[1]["pilot_error"]
    for target in (2 * eps, eps / 4):                 # the pilot suffices; it does not
        cfg = d.load_config(None, [*base, f"ode.error_target={target!r}"])
        resolved, info = sized(cfg, model, ov0, cfg.save_times())
        n = int(resolved.ode.samples)
        assert AUTO_PILOT <= n <= AUTO_MAX_SAMPLES and n & (n - 1) == 0, n
        assert info["target"] == error_target(cfg) == target and info["pilot_error"] > 0
        counts[target] = n
        res = run_ode(cfg)
        assert res.accuracy["samples"] == n
        if n < AUTO_MAX_SAMPLES:
            assert res.accuracy["relative_error_max"] <= 2 * target, res.accuracy
    assert counts[2 * eps] == AUTO_PILOT and counts[eps / 4] > AUTO_PILOT, counts
    cfg = d.load_config(None, ["ode.rhs=\"auto\""])
    assert resolved_rhs(cfg) == "symbolic"
    assert resolved_rhs(cfg.replace(**{"ode.form": "full"})) == "autodiff"


@pytest.mark.slow
def test_stiff_solver_matches_the_explicit_one():
    """`ode.solver = "kvaerno3"` (implicit: a Newton iteration on the field's Jacobian each
    stage) integrates the ODE to the explicit solver's trajectory within their tolerances. The
    solver is the engine's, whatever the model; the committee's small closed-form field keeps
    the compilation of the implicit solve (most of this test's time) small."""
    cfg = d.load_config(None, ['model.kind="committee"', "training.t_max=10",
                               "output.n_save=6"])
    a = run_ode(cfg)
    b = run_ode(cfg.replace(**{"ode.solver": "kvaerno3"}))
    assert float(a.risk[-1]) < 0.1 * float(a.risk[0])           # the run goes somewhere
    for x, y in zip(jax.tree.leaves(a.overlaps), jax.tree.leaves(b.overlaps)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=2e-6)
    np.testing.assert_allclose(np.asarray(a.risk), np.asarray(b.risk), atol=2e-6)


# last in the file: it clears JAX's caches, which the tests after it would compile again
def test_configs_differing_in_values_share_one_compiled_program():
    """A second solve whose field differs only in a value (the learning rate) reuses the
    compiled program (the field's floats are traced, not compiled in) and gives what a fresh
    compile gives, bit for bit."""
    model, ts, ov = _small(), np.linspace(0, 1, 3), _state(H=1, F=1)
    slow = ManifoldField.build(model, StepSizes(lr=0.5, lr_bias=1.0),
                               d.expectations.MonteCarlo(samples=256))
    jax.clear_caches()
    a = integrate(_field(model), ov, ts, Integrator.adaptive())
    b = integrate(slow, ov, ts, Integrator.adaptive())
    assert b.compile_s < 0.1 * a.compile_s, (a.compile_s, b.compile_s)
    assert not np.allclose(np.asarray(a.overlaps.m), np.asarray(b.overlaps.m))
    jax.clear_caches()
    c = integrate(slow, ov, ts, Integrator.adaptive())
    assert c.compile_s > 10 * b.compile_s
    for x, y in zip(jax.tree.leaves(b.overlaps), jax.tree.leaves(c.overlaps)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
