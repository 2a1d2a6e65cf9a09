"""Nodes closed under the model's symmetry group (docs/ode.md#nodes): the group a prior derives,
the exactness of the invariant subspaces of the discretized ODE and SDE drift at any node count,
the Gaussian prior's θ joined into the signal token's law, and the honesty of the error
estimate on closed nodes."""

from __future__ import annotations

import itertools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from _util import Z, make_model

import headflow.dynamics as d
from headflow.dynamics import Overlaps, StepSizes
from headflow.dynamics._overlaps import FieldLaw
from headflow.dynamics._risk import population_risk
from headflow.dynamics.expectations import QuasiMonteCarlo
from headflow.dynamics.models.attention import ManifoldField, key_nodes
from headflow.dynamics.ode import Integrator, build_field, integrate
from headflow.dynamics.priors import Discrete, FlippedSpike, Gaussian, OneHot
from headflow.dynamics.sde import build_sde

ACTIVATIONS = ("softmax", "softmax1", "bayes_softmax")

# feature 0 has a non-zero mean; features 1 and 2 are sign-symmetric and exchangeable
GAUSSIAN = {"prior.kind": "gaussian", "prior.mean": [1.0, 0.0, 0.0],
            "prior.var": [1.0, 0.5, 0.5], "prior.amplitude": 1.5}


@pytest.mark.parametrize("prior,flips,classes", [
    (FlippedSpike(3.0, 0.7, [1.0, 0.0, 0.0]), (1, 2), ((0,), (1, 2))),
    (FlippedSpike(3.0, 0.5, [1.0, 0.0, 0.0]), (0, 1, 2), ((0,), (1, 2))),
    (FlippedSpike(3.0, 0.5, [1.0, 1.0]), (), ((0, 1),)),
    (OneHot(3.0, 3), (), ((0, 1, 2),)),
    (OneHot(3.0, 3, [0.5, 0.25, 0.25]), (), ((0,), (1, 2))),
    (Gaussian([1.0, 0.0, 0.0], [1.0, 0.5, 0.5]), (1, 2), ((0,), (1, 2))),
    (Gaussian([0.0, 0.0, 0.0], [2.0, 1.0, 0.5]), (0, 1, 2), ((0,), (1,), (2,))),
    (Discrete([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0], [0.0, -2.0]]), (0, 1), ((0,), (1,))),
])
def test_the_prior_derives_its_feature_group(prior, flips, classes):
    sym = prior.symmetry()
    assert (sym.flips, sym.classes) == (flips, classes)
    perm, signs = sym.elements(24)
    order = 2 ** len(flips) * int(np.prod([math.factorial(len(c)) for c in classes]))
    assert perm.shape == signs.shape == (order, prior.F)
    # every element leaves the law unchanged, and the elements are distinct and closed under
    # composition (a group)
    assert all(prior.invariant_under(p, s) for p, s in zip(perm, signs))
    keys = {(tuple(p), tuple(s)) for p, s in zip(perm, signs)}
    assert len(keys) == order
    for (p1, s1), (p2, s2) in itertools.product(zip(perm, signs), repeat=2):
        assert (tuple(p1[p2]), tuple(s1[p2] * s2)) in keys


def test_a_traced_prior_gets_the_trivial_group():
    def order(a):
        return float(len(Gaussian([0.0, 0.0], [1.0, 1.0]).scaled(a).symmetry().flips)) + a

    assert float(jax.jit(order)(1.0)) == 1.0


def _cfg(activation: str, samples: int, **extra) -> d.Config:
    sets = {"model.L": 3, "model.H": 2, "model.F": 3, "model.activation": activation,
            "model.noise": 0.1, "training.lr": 0.8, "training.lr_bias": 0.5,
            "ode.samples": samples, "ode.expectation": "qmc", **GAUSSIAN, **extra}
    return d.Config().replace(**sets)


def _state(key, H: int, F: int, *, zero: tuple[int, ...] = (), equal_heads: bool = False,
           cross: bool = False) -> Overlaps:
    """A valid state with `m_{·f} = 0` (and `vks_{·f} = 0`) for f in `zero`, all heads equal
    when `equal_heads`, cross overlaps when `cross`."""
    k = jr.split(key, 8)
    rows = 1 if equal_heads else H
    m = 0.5 * jr.normal(k[0], (rows, F)).at[:, list(zero)].set(0.0)
    n = 0.4 * jr.normal(k[2], (rows,))
    b = 0.3 * jr.normal(k[4], (rows,))
    if equal_heads:
        m, n, b = jnp.tile(m, (H, 1)), jnp.tile(n, H), jnp.tile(b, H)
        r = 0.3 * jnp.eye(H) + 0.1
        t = 0.25 * jnp.eye(H) + 0.05
    else:
        A = jr.normal(k[1], (H, H)) / np.sqrt(H)
        C = jr.normal(k[3], (H, H)) / np.sqrt(H)
        r, t = 0.3 * A @ A.T + 0.05 * jnp.eye(H), 0.3 * C @ C.T + 0.05 * jnp.eye(H)
    ov = Overlaps.manifold(m, m @ m.T + r, n, jnp.outer(n, n) + t, b)
    if cross:
        vks = (0.1 * jr.normal(k[5], (H, F))).at[:, list(zero)].set(0.0)
        kv = 0.05 * jr.normal(k[6], (H, H))
        kvs = 0.05 * jr.normal(k[7], (H,))
        if equal_heads:
            vks, kv, kvs = jnp.tile(vks[:1], (H, 1)), 0.05 * jnp.ones((H, H)), kvs[0] * jnp.ones(H)
        ov = Overlaps(m=ov.m, q=ov.q, n=ov.n, s=ov.s, b=ov.b, kv=kv, kvs=kvs, vks=vks)
    ov.check_psd(1.0)
    return ov


def _scale(tree) -> float:
    return max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(tree))


def _off_subspace(ov: Overlaps, zero: tuple[int, ...], equal_heads: bool) -> float:
    """The largest component of `ov` that leaves the invariant subspace."""
    parts = [ov.m[..., list(zero)], ov.vks[..., list(zero)]]
    if equal_heads:
        for name in ("m", "n", "b", "vks", "kvs"):
            x = getattr(ov, name)
            parts.append(x - x[:1])
        for name in ("q", "s", "kv"):
            x = getattr(ov, name)
            eye = jnp.eye(x.shape[-1])
            parts.append(x - x[0, 0] * eye - x[0, 1] * (1 - eye))
    return max(float(jnp.max(jnp.abs(p))) for p in parts if p.size)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("samples", [256, 2048])
def test_manifold_field_is_tangent_to_the_invariant_subspaces(activation, samples):
    """Zero overlap with the sign-symmetric features, and equal heads: the discretized field
    (the default, generated right-hand side) has no component leaving them, at any node count."""
    field = build_field(_cfg(activation, samples))
    assert field.nodes.orbit == 2 * 8            # heads (2) × flips of 1, 2 (4) × exchange (2)
    f = jax.jit(lambda o: field(0.0, o))
    zero = (1, 2)
    for equal in (False, True):
        ov = _state(jr.key(int(equal)), 2, 3, zero=zero, equal_heads=equal)
        dv = f(ov)
        assert _off_subspace(dv, zero, equal) < 1e-12 * _scale(dv)
    # exchangeable features: equal overlaps with features 1 and 2 stay equal
    ov = _state(jr.key(5), 2, 3)
    ov = Overlaps.manifold(ov.m.at[:, 2].set(ov.m[:, 1]), ov.q, ov.n, ov.s, ov.b)
    ov = Overlaps.manifold(ov.m, ov.m @ ov.m.T + ov.r + jnp.eye(2), ov.n, ov.s, ov.b)
    dm = f(ov).m
    assert float(jnp.max(jnp.abs(dm[:, 1] - dm[:, 2]))) < 1e-12 * _scale(dm)


def test_ode_stays_on_the_invariant_subspace():
    """Integrated from a state with zero overlap on the sign-symmetric features and equal
    heads, the 256-node ODE stays there to round-off while the rest moves at O(1) (Bayes-softmax
    heads; that every activation's field is tangent to the subspace is checked above, and what
    the integration adds does not depend on the activation)."""
    field = build_field(_cfg("bayes_softmax", 256))
    zero = (1, 2)
    ov0 = _state(jr.key(7), 2, 3, zero=zero, equal_heads=True)
    sol = integrate(field, ov0, np.linspace(0.0, 3.0, 4), Integrator.adaptive(rtol=1e-8))
    ov = jax.tree.map(lambda x: x[-1], sol.overlaps)
    assert _off_subspace(ov, zero, True) < 1e-12
    assert float(jnp.max(jnp.abs(ov.m - ov0.m))) > 1e-2


@pytest.mark.parametrize("samples", [256, 1024])
def test_full_field_and_sde_drift_are_tangent_off_the_manifold(samples):
    """The full local-field form (cross overlaps kept) and the SDE's drift: `m_{·f}` and
    `vks_{·f}` stay zero for the sign-symmetric features, equal heads stay equal."""
    cfg = _cfg("bayes_softmax", samples, **{"ode.form": "full", "sde.samples_drift": samples,
                                            "sde.samples_noise": 64})
    zero = (1, 2)
    drifts = [build_field(cfg), build_sde(cfg, 1000).drift]
    for field in drifts:
        f = jax.jit(lambda o, field=field: field(0.0, o))
        for equal in (False, True):
            ov = _state(jr.key(3 + int(equal)), 2, 3, zero=zero, equal_heads=equal, cross=True)
            dv = f(ov)
            assert _off_subspace(dv, zero, equal) < 1e-12 * _scale(dv)


def test_gaussian_theta_joins_the_signal_token():
    """With θ joined into `χ*_1 = θ + g*_1 ~ N(μ, 1 + σ²)` the nodes carry no θ coordinates,
    and the risk agrees with plain Monte Carlo that draws θ and `g*` separately."""
    prior = Gaussian([1.0, 0.0], [2.0, 0.5])
    model = make_model("softmax", L=3, H=2, prior=prior, noise=0.1)
    assert prior.n_node_dims == 0 and prior.n_normal_dims == 2
    ov = _state(jr.key(11), 2, 2)
    risk, err = population_risk(model, ov, QuasiMonteCarlo(samples=1 << 14))
    n = 1 << 16
    kt, ks, kp = jr.split(jr.key(12), 3)
    theta = prior.sample(kt, (n,))
    g_star = jr.normal(ks, (n, 2, 3))
    g_perp = jr.normal(kp, (n, 2, 3))
    law = FieldLaw.from_overlaps(ov, model.rho, manifold=True)

    def e2(th, gs, gp):
        chi_star, chi = law.key_fields(th, gs, gp)
        return model.conditional_error(chi, ov.b, law.value_moments(chi_star, gp))

    vals = jax.vmap(e2)(theta, g_star, g_perp)
    mc, se = float(vals.mean()), float(vals.std() / np.sqrt(n))
    assert abs(float(risk) - mc) < Z * np.hypot(se, float(err))


@pytest.mark.parametrize("prior", [Gaussian([1.0, 0.0], [1.0, 1.0]),
                                   FlippedSpike(2.5, 0.7, [1.0, 0.0])])
def test_error_estimate_is_honest_on_closed_nodes(prior):
    """`with_error` on closed nodes (each replicate made of whole orbits): over independent
    scramblings, the estimated error matches the actual error against a 2^16-node reference
    within a factor 2 (root mean square over the seeds and the entries)."""
    model = make_model("bayes_softmax", L=3, H=2, prior=prior, noise=0.1)
    steps = StepSizes(lr=0.8, lr_bias=0.5)
    ov = _state(jr.key(21), 2, 2)

    def field(samples, seed):
        nodes = key_nodes(model, QuasiMonteCarlo(samples=samples, seed=seed))
        return ManifoldField(model=model, steps=steps, nodes=nodes)

    ref = field(1 << 16, 99)(0.0, ov)
    estimate = eqx.filter_jit(lambda fl, o: fl.with_error(o))
    actual, estimated = [], []
    for seed in range(12):
        rhs, err = estimate(field(512, seed), ov)
        for name in ("m", "q", "n", "s", "b"):
            actual.append(np.ravel(getattr(rhs, name) - getattr(ref, name)))
            estimated.append(np.ravel(getattr(err, name)))
    a, e = np.concatenate(actual), np.concatenate(estimated)
    ratio = np.sqrt(np.mean(a**2) / np.mean(e**2))
    assert 0.5 < ratio < 2.0, ratio
