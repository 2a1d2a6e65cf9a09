"""Learning-rate schedules (`headflow.dynamics.Schedule`, `[training] lr_schedule`): the object
itself, its config validation, and that the ODEs and both SGD simulators read it at the same times
(`t` of the integration; `t = k/D` at step `k`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from headflow import sims
from headflow.dynamics import ConfigError, Schedule, StepSizes, load_config
from headflow.dynamics.config import Config
from headflow.dynamics.ode import build_field, initial_state, run_ode

CONFIGS = Path(__file__).resolve().parents[1] / "validation" / "configs"

# -- the object ----------------------------------------------------------------------------


def test_linear_and_log_interpolation():
    lin = Schedule.from_table("s", {"kind": "linear", "times": [1.0, 3.0], "values": [2.0, 1.0]})
    np.testing.assert_allclose([float(lin(t)) for t in (0.0, 1.0, 2.0, 2.5, 3.0, 10.0)],
                               [2.0, 2.0, 1.5, 1.25, 1.0, 1.0], rtol=1e-15)
    log = Schedule.from_table("s", {"kind": "log", "times": [1.0, 100.0], "values": [1.0, 0.0]})
    # linear in log t: halfway (in log) at t = 10; flat before the first knot, also at t = 0
    np.testing.assert_allclose([float(log(t)) for t in (0.0, 0.5, 1.0, 10.0, 100.0, 1e4)],
                               [1.0, 1.0, 1.0, 0.5, 0.0, 0.0], rtol=1e-14, atol=1e-15)
    assert float(Schedule.constant(0.3)(7.0)) == 0.3


def test_differentiable_in_the_knot_values():
    s = Schedule.from_table("s", {"times": [0.0, 2.0, 4.0], "values": [1.0, 0.5, 0.25]})
    grad = jax.grad(lambda v: s.with_values(v)(3.0))(jnp.asarray(s.values))
    np.testing.assert_allclose(grad, [0.0, 0.5, 0.5], atol=1e-15)


def test_at_without_schedule_is_the_same_object():
    hp = StepSizes(lr=0.7, lr_bias=0.3, weight_decay=0.1)
    assert not hp.scheduled and hp.at(2.0) is hp
    sched = StepSizes(lr=9.0, lr_bias=0.3, lr_schedule=Schedule.from_table(
        "s", {"times": [0.0, 1.0], "values": [1.0, 0.0]}))
    now = sched.at(0.25)
    assert not now.scheduled
    assert float(now.lr) == 0.75 and now.lr_bias == 0.3


BAD = [
    ("[1, 2]", "must be a table"),
    ('{kind = "cosine", times = [1], values = [1]}', "kind = 'cosine'"),
    ('{times = [1, 2], values = [1]}', "2 times but 1 values"),
    ('{times = [2, 1], values = [1, 1]}', "strictly increasing"),
    ('{kind = "log", times = [0, 1], values = [1, 1]}', "> 0 for kind = 'log'"),
    ('{times = [0, 1], values = [1, -1]}', ">= 0"),
    ('{times = [0, 1], values = [1, 1], knots = 2}', "unknown key(s) knots"),
    ('{values = [1]}', "times is required"),
    ('{times = [], values = []}', "non-empty list of numbers"),
    ('{times = [0, "a"], values = [1, 1]}', "non-empty list of numbers"),
]


@pytest.mark.parametrize("value,message", BAD)
def test_config_errors_are_one_line(value, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"training.lr_schedule={value}"])
    assert message in str(err.value) and "\n" not in str(err.value)
    assert "training.lr_schedule" in str(err.value)


def test_config_round_trip():
    cfg = load_config(None, ['training.lr_schedule={kind = "log", times = [0.5, 5, 50], '
                             'values = [1, 0.5, 0.1]}',
                             "training.lr_bias_schedule={times = [0, 10], values = [2, 1]}"])
    again = Config.from_toml(cfg.to_toml())
    assert again == cfg and again.fingerprint() == cfg.fingerprint()
    hp = StepSizes.from_config(again.training)
    assert hp.lr_schedule is not None and hp.lr_schedule.kind == "log"
    assert hp.lr_schedule.times == (0.5, 5.0, 50.0)
    assert hp.lr_bias_schedule is not None and float(hp.lr_bias_schedule(5.0)) == 1.5


# -- theory and simulation read the schedule at the same times ------------------------------

# zero before t = 1 and after t = 3, up to 1 in between: nothing may move outside [1, 3]
WINDOW = "{times = [1.0, 1.5, 2.5, 3.0], values = [0.0, 1.0, 1.0, 0.0]}"
SMALL = ["model.L=2", "model.H=1", "ode.samples=256", "training.t_max=4", "output.n_save=9",
         "sim.dim=200", "sim.seeds=2", "sim.risk_samples=256", "model.noise=0.2",
         "training.weight_decay=0.1", "model.activation=softmax1"]


def _window_cfg(*extra: str) -> Config:
    return load_config(None, [*SMALL, f"training.lr_schedule={WINDOW}",
                              f"training.lr_bias_schedule={WINDOW}", *extra])


def _frozen_outside_window(t, ov, tol: float = 0.0) -> None:
    """Leaves `(T, …)`: the saved states at t ≤ 1 equal the first one and those at t ≥ 3 equal
    the state at t = 3 (to `tol`: the ODE's solver steps onto the knots, but its saved states
    are interpolated); in between they move."""
    t = np.asarray(t)
    before, after = np.flatnonzero(t <= 1.0), np.flatnonzero(t >= 3.0)
    inside = np.flatnonzero((t > 1.0) & (t < 3.0))
    assert len(before) >= 2 and len(after) >= 2 and len(inside) >= 2
    for name in ("m", "q", "n", "s", "b"):
        x = np.asarray(getattr(ov, name))
        for i in before:
            np.testing.assert_allclose(x[i], x[0], rtol=tol, atol=tol, err_msg=name)
        for i in after:
            np.testing.assert_allclose(x[i], x[after[0]], rtol=tol, atol=tol, err_msg=name)
        assert np.max(np.abs(x[inside[-1]] - x[0])) > 1e-3, name


def test_ode_follows_the_schedule():
    res = run_ode(_window_cfg())
    _frozen_outside_window(res.t, res.overlaps, tol=1e-12)


@pytest.mark.parametrize("space,dtype", [("weights", "float32"), ("overlaps", "float64")])
def test_sgd_follows_the_schedule(space, dtype):
    res = sims.run_sgd(_window_cfg(f"sim.space={space}", f"sim.dtype={dtype}"))
    for s in range(2):
        _frozen_outside_window(res.t, jax.tree.map(lambda x, s=s: x[s], res.overlaps))


def test_sde_follows_the_schedule():
    """The drift and the diffusion of the SDE both read η(t): with η = η_b = 0 outside [1, 3]
    every path is frozen there exactly (the step grid lands on the knots)."""
    from headflow.dynamics.sde import run_sde

    res = run_sde(_window_cfg("sde.paths=2", "sde.dt=0.1", "sde.samples_noise=64"))
    assert np.all(np.asarray(res.valid))
    for p in range(2):
        _frozen_outside_window(res.t, jax.tree.map(lambda x, p=p: x[p], res.overlaps))


def test_flat_schedule_reproduces_the_constant_step_bit_for_bit():
    # the knot times of WINDOW (static, part of the program): the scheduled overlap-space run
    # is the program of `test_sgd_follows_the_schedule[overlaps-float64]` with other values
    flat = "{times = [1.0, 1.5, 2.5, 3.0], values = [0.6, 0.6, 0.6, 0.6]}"
    const = load_config(None, [*SMALL, "training.lr=0.6", "training.lr_bias=0.6",
                               "sim.dtype=float64"])
    sched = load_config(None, [*SMALL, f"training.lr_schedule={flat}",
                               f"training.lr_bias_schedule={flat}", "sim.dtype=float64"])
    for space in ("weights", "overlaps"):
        a = sims.run_sgd(dataclasses.replace(const, sim=dataclasses.replace(
            const.sim, space=space)))
        b = sims.run_sgd(dataclasses.replace(sched, sim=dataclasses.replace(
            sched.sim, space=space)))
        for name in ("m", "q", "n", "s", "b"):
            np.testing.assert_array_equal(getattr(a.overlaps, name),
                                          getattr(b.overlaps, name), err_msg=f"{space} {name}")
    ov = initial_state(const)
    fc, fs = build_field(const), build_field(sched)
    for t in (0.0, 1.3):
        da, db = fc(t, ov), fs(t, ov)
        for name in ("m", "q", "n", "s", "b"):
            np.testing.assert_array_equal(getattr(da, name), getattr(db, name))


def test_the_scalar_parameters_own_schedule_is_a_generic_key():
    """A model that trains scalar parameters gets `<lr_bias_key>_schedule` beside its step
    (the committee: `lr_second_schedule`). Without it the second layer follows `lr` and
    `lr_schedule`; with it, the second layer's step is that schedule (a flat one equals the
    constant step in the drift bit for bit), and it is a differentiable key of its own."""
    base = ["model.train_second_layer=true", "training.t_max=4"]
    cfg = load_config(CONFIGS / "committee.toml", [*base, "training.lr_second=0.6"])
    flat = load_config(CONFIGS / "committee.toml", [
        *base, "training.lr_second_schedule={times = [0.0, 2.0], values = [0.6, 0.6]}"])
    follows = load_config(CONFIGS / "committee.toml", [
        *base, "training.lr_schedule={times = [0.0, 2.0], values = [0.5, 0.1]}"])
    assert StepSizes.from_config(cfg.training).lr_bias_schedule is None
    steps = StepSizes.from_config(flat.training)
    assert steps.lr_bias == flat.training.lr and float(steps.lr_bias_schedule(1.0)) == 0.6
    shared = StepSizes.from_config(follows.training)
    assert float(shared.lr_bias_schedule(1.0)) == float(shared.lr_schedule(1.0)) == 0.3
    state = initial_state(cfg)
    for t in (0.0, 1.3):
        da, db = build_field(cfg)(t, state), build_field(flat)(t, state)
        np.testing.assert_array_equal(da.gram, db.gram)
        np.testing.assert_array_equal(da.params["v"], db.params["v"])
    model = flat.build_model()
    keys = [h.key for h in model.hyperparameters(flat, steps)]
    assert keys[0] == "training.lr" and "training.lr_second_schedule" in keys
    assert "training.lr_second" not in keys
    with pytest.raises(ConfigError, match="training.lr_second_schedule"):
        load_config(CONFIGS / "committee.toml",
                    [*base, "training.lr_second_schedule={times = [1.0, 0.0], values = [1, 1]}"])
