"""The attention model's reduced right-hand side against an independent implementation: the
plain-numpy one of `benchmarks/_numpy_ode.py` (closed-form activation Jacobians, written
without JAX and without the engine's code), evaluated on the same nodes at random states on
the invariant manifold. They agree to round-off for every activation, with the η² terms,
weight decay, a batch and label noise on and off."""

from __future__ import annotations

import sys
from pathlib import Path

import equinox as eqx
import jax.random as jr
import numpy as np
import pytest

import headflow.dynamics as d
from headflow.dynamics.ode import build_field

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _numpy_ode import NumpyManifoldRHS  # noqa: E402
from bench_expectations import random_state as _state  # noqa: E402


def _flat(ov) -> np.ndarray:
    return np.concatenate([np.asarray(x).ravel() for x in (ov.m, ov.q, ov.n, ov.s, ov.b)])


@pytest.mark.parametrize("rhs", ["autodiff", "symbolic"])
@pytest.mark.parametrize("activation", ["softmax", "softmax1", "bayes_softmax"])
@pytest.mark.parametrize("extras", [
    [],
    ["ode.sgd_noise=true", "training.weight_decay=0.1", "training.batch=2", "model.noise=0.3",
     "training.lr=0.7", "training.lr_bias=1.3"],
], ids=["plain", "noise_decay_batch"])
def test_manifold_field_equals_the_numpy_reference(activation, extras, rhs):
    """Both right-hand sides of the reduced form: autodiff of the predictor on the nodes, and
    the generated (symbolic) code."""
    cfg = d.load_config(None, ["model.L=3", "model.H=2", f"model.activation={activation}",
                               'ode.form="manifold"', "ode.samples=512", f'ode.rhs="{rhs}"',
                               *extras])
    model = cfg.build_model()
    field = build_field(cfg, model)
    assert type(field).__name__ == {"autodiff": "ManifoldField", "symbolic": "SymbolicField"}[rhs]
    nodes = field.nodes
    assert np.allclose(np.asarray(nodes.w), 1.0 / nodes.size)    # the reference averages
    ref = NumpyManifoldRHS(
        activation=activation, L=model.L, H=model.H, F=model.F,
        points=np.asarray(model.prior.points), weights=np.asarray(model.prior.weights),
        noise=model.noise, rho=model.rho, lr=cfg.training.lr, lr_bias=cfg.training.lr_bias,
        weight_decay=cfg.training.weight_decay, batch=cfg.training.batch,
        sgd_noise=cfg.ode.sgd_noise, nodes=np.asarray(nodes.x))
    rhs = eqx.filter_jit(lambda f, o: f(0.0, o))
    for seed in range(3):
        ov = _state(jr.key(seed), model.H, model.F)
        got, want = _flat(rhs(field, ov)), ref(0.0, _flat(ov))
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12 * np.max(np.abs(want)))
        assert np.max(np.abs(want)) > 1e-2                        # not a trivial state
