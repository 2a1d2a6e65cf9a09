"""Runs that differ only in values share their compiled programs: a second run with other step
sizes, label noise, model values or dimension traces no new program (JAX reports every trace
of a program it has not compiled in this process, `/jax/core/compile/jaxpr_trace_duration`).

Each of these programs was once compiled per call or per value (a closure over the model, a
Python float or D compiled in), which the suite and the notebooks paid for many times over."""

from __future__ import annotations

import contextlib

import jax
import jax.random as jr
import numpy as np
import pytest

import headflow.dynamics as d
from headflow.dynamics.sde import build_sde, initial_states
from headflow.sims import run_sgd
from headflow.sims.attention import recorded_risk

TRACE = "/jax/core/compile/jaxpr_trace_duration"


@pytest.fixture(autouse=True)
def _fresh():
    """Each test starts with no program in memory: a program an earlier test traced with the
    second run's values would hide a second run that cannot reuse the first's."""
    jax.clear_caches()


@contextlib.contextmanager
def _traces():
    """The seconds of every program traced inside the block, one entry per program."""
    seen: list[float] = []

    def on(event: str, duration: float, **_: object) -> None:
        if event == TRACE:
            seen.append(duration)

    jax.monitoring.register_event_duration_secs_listener(on)
    try:
        yield seen
    finally:
        jax.monitoring.unregister_event_duration_listener(on)


def _committee(*sets: str) -> d.Config:
    return d.load_config(None, ['model.kind="committee"', "model.K=2", "model.M=2",
                                "training.t_max=1", "output.n_save=3", "sim.seeds=2",
                                "sim.dim=100", *sets])


@pytest.mark.parametrize("space", ["weights", "overlaps"])
def test_family_sgd_with_other_values_traces_nothing(space):
    """Committee SGD in either space: a run with another η and label noise σ reuses every
    program of the first (and gives another answer)."""
    first = run_sgd(_committee(f'sim.space="{space}"', "training.lr=0.5", "model.noise=0.0"))
    other = _committee(f'sim.space="{space}"', "training.lr=0.8", "model.noise=0.3")
    with _traces() as seen:
        second = run_sgd(other)
    assert seen == [], f"{len(seen)} programs traced again"
    assert not np.allclose(np.asarray(first.risk), np.asarray(second.risk))


def test_sde_start_at_another_dimension_traces_nothing():
    """The SDE's initial draws of a family model at D = 10³ and 10⁶ are one program (D is
    traced: the Bartlett draw uses it as a value), and their law scales with D: the
    off-diagonal overlaps shrink like D^-1/2."""
    cfg = _committee()
    model = cfg.build_model()
    diffusion = build_sde(cfg, 1000, model).diffusion
    keys = jr.split(jr.key(0), 256)
    small = np.asarray(initial_states(cfg, model, keys, 1000, diffusion))
    with _traces() as seen:
        large = np.asarray(initial_states(cfg, model, keys, 10**6, diffusion))
    assert seen == [], f"{len(seen)} programs traced again"
    spread_small, spread_large = np.std(small, axis=0), np.std(large, axis=0)
    off = spread_small > 0.01                     # the entries that fluctuate at O(D^-1/2)
    np.testing.assert_allclose(np.median(spread_large[off] / spread_small[off]),
                               np.sqrt(1000 / 10**6), rtol=0.15)


def test_attention_recorded_risk_with_other_model_values_traces_nothing():
    """The attention SGD's recorded risk for a model with another label noise and other
    states reuses the program of the first call, and the noise enters its answer."""
    cfg = d.load_config(None, ["model.L=2", "sim.dim=50", "sim.seeds=1", "training.t_max=0.2",
                               "output.n_save=3", "sim.risk_samples=256"])
    res = run_sgd(cfg)
    a, _ = recorded_risk(cfg.build_model(), res.overlaps, samples=256)
    noisy = cfg.replace(**{"model.noise": 0.5}).build_model()
    with _traces() as seen:
        b, _ = recorded_risk(noisy, res.overlaps, samples=256)
    assert seen == [], f"{len(seen)} programs traced again"
    # label noise σ adds σ² to the attention model's risk of every state
    np.testing.assert_allclose(np.asarray(b) - np.asarray(a), 0.5**2, rtol=1e-10)
