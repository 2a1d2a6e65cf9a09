"""One-step drift test (issue 3): the ODE right-hand side equals the average one-step SGD
increment of every order parameter (scaled by D), within Monte Carlo error bars.

The SGD increment is exactly quadratic in the learning rate, `DΔ = −η a + η² c`, so running the
same samples with `+η` and `−η` separates the drift `(Δ₊ − Δ₋)/2` from the SGD-noise part
`(Δ₊ + Δ₋)/2`, which lets us check the ODE with and without its `η²` terms.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import headflow.dynamics as d
from headflow.dynamics import StepSizes
from headflow.dynamics.models.attention import FullField, ManifoldField
from headflow.sims.attention import sgd_step

D = 1000
N_SGD = 1 << 13
N_ODE = 1 << 15
FIELDS = ("m", "q", "n", "s", "b", "kv", "kvs", "vks")

_with_error = eqx.filter_jit(lambda field, ov: field.with_error(ov))


from _util import off_manifold_state as _state  # noqa: E402


@eqx.filter_jit
def _increments(model, plus, minus, teacher, w, keys):
    """`D × (one-step change)` of all overlaps from the weights `w`, one step per key at `plus`
    and at `minus` (same samples). The weights and the teacher are arguments, not constants of
    the program, so the two states of an activation share one compiled program."""
    base = w.gram_rows(teacher)

    def inc(hp, key):
        w1 = sgd_step(model, hp, teacher, w, key)
        return d.Overlaps.from_student_rows(D * (w1.gram_rows(teacher) - base),
                                            D * (w1.b - w.b), model.F)

    return jax.lax.map(lambda k: (inc(plus, k), inc(minus, k)), keys, batch_size=512)


def _sgd_increments(model, ov, lr, lr_bias, wd, batch):
    """Per-sample `D × (one-step change)` of all overlaps at +η and −η (same samples)."""
    teacher = d.make_teacher(jr.key(1), D, model.F, model.rho, dtype=jnp.float64)
    w = d.weights_from_overlaps(jr.key(2), ov, teacher, model.rho, dtype=jnp.float64)
    got = w.overlaps(teacher)
    np.testing.assert_allclose(np.asarray(got.q), np.asarray(ov.q), atol=1e-10)
    plus = StepSizes(lr=lr, lr_bias=lr_bias, weight_decay=wd, batch=batch)
    minus = StepSizes(lr=-lr, lr_bias=-lr_bias, weight_decay=wd, batch=batch)
    return _increments(model, plus, minus, teacher, w, jr.split(jr.key(3), N_SGD))


def _mean_err(samples):
    mean = jax.tree.map(lambda x: jnp.mean(x, 0), samples)
    err = jax.tree.map(lambda x: jnp.std(x, 0) / np.sqrt(x.shape[0]), samples)
    return mean, err


def _check(name, rhs, rhs_err, inc, inc_err, fields=FIELDS, zmax=5.0):
    zs, scale = [], 0.0
    for f in fields:
        a, ea = np.asarray(getattr(rhs, f)), np.asarray(getattr(rhs_err, f))
        b, eb = np.asarray(getattr(inc, f)), np.asarray(getattr(inc_err, f))
        z = np.abs(a - b) / np.sqrt(ea**2 + eb**2 + 1e-30)
        zs.append(z.max())
        assert z.max() < zmax, (f"{name}: d{f}/dt ODE {a.ravel()} vs SGD {b.ravel()} "
                                f"(z={z.max():.1f})")
        scale = max(scale, float(np.max(np.abs(b) / (eb + 1e-30))))
    assert scale > 20, f"{name}: increments too small to test anything"


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["softmax", "softmax1", "bayes_softmax"])
@pytest.mark.parametrize("on_manifold", [True, False])
def test_rhs_equals_mean_sgd_increment(activation, on_manifold):
    lr, lr_bias, wd, batch = 0.8, 1.5, 0.2, 2
    model = d.Model(L=3, H=2, activation=d.activations.get_activation(activation),
                    prior=d.priors.FlippedSpike(2.0, 0.7, [1.0]), noise=0.3, rho=1.0)
    ov = _state(on_manifold)
    plus, minus = _sgd_increments(model, ov, lr, lr_bias, wd, batch)
    drift = jax.tree.map(lambda a, b: (a - b) / 2, plus, minus)
    noise = jax.tree.map(lambda a, b: (a + b) / 2, plus, minus)
    backend = d.expectations.MonteCarlo(samples=N_ODE, seed=5)
    fields = [FullField] + ([ManifoldField] if on_manifold else [])
    for cls in fields:
        steps = StepSizes(lr, lr_bias, wd, batch)
        with_noise = cls.build(model, steps, backend, sgd_noise=True)
        no_noise = cls.build(model, steps, backend, sgd_noise=False)
        r1, e1 = _with_error(with_noise, ov)
        r0, e0 = _with_error(no_noise, ov)
        tag = f"{activation} {cls.__name__} {'on' if on_manifold else 'off'} manifold"
        _check(tag + " (with η²)", r1, e1, *_mean_err(plus))
        _check(tag + " (gradient flow)", r0, e0, *_mean_err(drift))
        # the η² terms alone, where they act (student-student overlaps)
        eta2 = jax.tree.map(lambda a, b: a - b, r1, r0)
        eta2_err = jax.tree.map(lambda a, b: jnp.sqrt(a**2 + b**2), e1, e0)
        _check(tag + " (η² terms)", eta2, eta2_err, *_mean_err(noise), fields=("q", "s", "kv"))
