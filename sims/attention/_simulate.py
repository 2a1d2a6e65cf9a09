"""The attention model's online SGD over seeds in weight space ([`simulate`][]) or in overlap
space (`headflow.sims.attention._chain`), recording the overlaps on a time grid; registered with the
generic [`headflow.sims.run_sgd`][]."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from headflow.dynamics import (Config, DivergenceError, Model, Overlaps, StepSizes, Teacher,
                               Weights, init_weights, make_teacher, population_risk,
                               require_x64, risk_nodes, weights_from_overlaps)
from headflow.dynamics.expectations import MonteCarlo
from headflow.dynamics.ode import BLOWUP, bounded
from headflow.dynamics.sharding import gather

from .._runs import run_segments, save_steps, seed_keys
from .._simulate import simulate_states
from ._chain import simulate_overlaps
from ._sgd import advance


class Simulation(eqx.Module):
    """What [`simulate`][] recorded: the save times `t (T)` (in `steps/D`) and their `steps`,
    the overlaps (leaves `(S, T, ...)`), and the teachers and final weights of every seed."""

    t: Float[Array, " T"]
    steps: Int[Array, " T"]
    overlaps: Overlaps
    teachers: Teacher
    weights: Weights


@eqx.filter_jit
def _segment(model: Model, hp: StepSizes, teachers: Teacher, w: Weights, keys, starts, counts):
    def one_seed(teacher, w, key):
        def body(w, sc):
            w = advance(model, hp, teacher, w, key, sc[0], sc[1])
            return w, (w.gram_rows(teacher), w.b.astype(jnp.float64))

        return jax.lax.scan(body, w, (starts, counts))

    return jax.vmap(one_seed)(teachers, w, keys)


def simulate(model: Model, hp: StepSizes, *, dim: int, seeds, times,
             init: Weights | Callable[..., Weights] | None = None,
             init_std: tuple[float, float, float] = (0.1, 0.1, 0.0),
             dtype=jnp.float32, progress: bool = False, segments: int = 20) -> Simulation:
    """Run online SGD for every seed and record the overlaps at the save times.

    **Arguments:**

    - `model`, `hp`: the model and the SGD step sizes.
    - `dim`: D. `seeds`: a list of ints (one independent run each: teacher, init, data).
    - `times`: save times in `t = steps/D` (recorded after `round(t·D)` steps; 0 = the
      initial state).
    - `init`: `None` (random init with `init_std = (σ_k, σ_v, b_0)`), weights with a leading
      seed axis, or a callable `init(key, teacher) -> Weights` (e.g. weights built to have given
      overlaps, [`headflow.dynamics.weights_from_overlaps`][]).
    - `dtype`: float32 (default) or float64.
    - `progress`: a progress bar on stderr.

    **Returns:** a [`Simulation`][].

    **Raises:** [`headflow.dynamics.DivergenceError`][] when the overlaps become NaN/inf or exceed
    `headflow.dynamics.ode.BLOWUP`.
    """
    require_x64("the SGD simulator (its overlaps)")
    seeds = [int(s) for s in seeds]
    steps_at = save_steps(times, dim)
    ks = jnp.stack([seed_keys(s) for s in seeds])           # (S, 3)
    teachers = jax.vmap(lambda k: make_teacher(k, dim, model.F, model.rho, dtype))(ks[:, 0])
    if init is None:
        sk, sv, b0 = init_std
        w = jax.vmap(lambda k: init_weights(k, model.H, dim, key_std=sk, value_std=sv, bias=b0,
                                            dtype=dtype))(ks[:, 1])
    elif callable(init) and not isinstance(init, Weights):
        w = jax.vmap(init)(ks[:, 1], teachers)
    else:
        w = init
    w = jax.tree.map(lambda x: x.astype(dtype), w)
    if not model.train_values:
        w = eqx.tree_at(lambda w: w.V, w, jnp.broadcast_to(teachers.vstar[:, None, :], w.V.shape))
    n = len(seeds)

    def segment(w, data, starts, counts):
        teachers, keys = data
        return _segment(model, hp, teachers, w, keys, starts, counts)

    def check(w, recorded, t_end: float) -> None:
        r, b = recorded
        bad = gather(~bounded(r, axis=(1, 2, 3)) | ~bounded(b, axis=(1, 2)), n)
        if bool(jnp.any(bad)):
            idx = int(np.argmax(np.asarray(bad)))
            raise DivergenceError(
                f"SGD diverged (seed {seeds[idx]}, D={dim}): overlaps became NaN/inf or "
                f"exceeded {BLOWUP:.0e} before t = {t_end:.4g}; try a smaller "
                f"training.lr (now {float(hp.lr):g})")

    w, (rows, biases) = run_segments(segment, w, (teachers, ks[:, 2]), steps_at, dim=dim,
                                     seeds=n, segments=segments, check=check,
                                     progress=progress, desc="SGD")
    all_rows, all_biases, teachers, w = gather((rows, biases, teachers, w), n)
    ov = jax.vmap(jax.vmap(lambda r, b: Overlaps.from_student_rows(r, b, model.F)))(
        all_rows, all_biases)
    return Simulation(t=jnp.asarray(steps_at / dim), steps=jnp.asarray(steps_at), overlaps=ov,
                      teachers=teachers, weights=w)


def recorded_risk(model: Model, ov: Overlaps, *, samples: int = 8192, seed: int = 0,
                  batch_size: int = 8) -> tuple[Float[Array, "*batch"], Float[Array, "*batch"]]:
    """Population risk and its Monte Carlo error for overlaps with any leading batch axes
    (fixed nodes for all of them: common random numbers)."""
    nodes = risk_nodes(model, MonteCarlo(samples=samples, seed=seed))
    batch_shape = ov.b.shape[:-1]
    flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[len(batch_shape):]), ov)

    @jax.jit
    def run(flat, nodes):
        return jax.lax.map(lambda o: population_risk(model, o, nodes), flat,
                           batch_size=batch_size)

    risk, err = run(flat, nodes)
    return risk.reshape(batch_shape), err.reshape(batch_shape)


def sgd_overlaps(cfg: Config, *, dim: int, seed_list: list[int], times: np.ndarray,
                 start: Overlaps | None = None, progress: bool = False
                 ) -> tuple[np.ndarray, Overlaps]:
    """The recorded steps and overlaps (leaves `(S, T, ...)`) of online SGD as configured, in
    the space `[sim] space` names: the D-dimensional weights ([`simulate`][]) or the exact
    chain of the overlaps ([`simulate_overlaps`][], float64 whatever `sim.dtype` says).

    `start`: overlaps (one state, no seed axis) to start every seed from; in weight space
    weights with exactly these overlaps are drawn ([`headflow.dynamics.weights_from_overlaps`][]).
    Default: the random initialization of `[training]`."""
    model = cfg.build_model()
    tr = cfg.training
    hp = StepSizes.from_config(tr)
    init_std = (tr.init_key_std, tr.init_value_std, tr.init_bias)
    if cfg.sim.space == "overlaps":
        init = None
        if start is not None:
            init = jax.tree.map(lambda x: jnp.broadcast_to(jnp.asarray(x, jnp.float64),
                                                           (len(seed_list), *jnp.shape(x))),
                                start)
        ov = simulate_overlaps(model, hp, dim=dim, seeds=seed_list, times=times, init=init,
                               init_std=init_std, progress=progress)
        return save_steps(times, dim), ov
    dtype = jnp.dtype(cfg.sim.dtype)
    winit = None
    if start is not None:
        ov0 = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), start)

        def winit(key, teacher):
            return weights_from_overlaps(key, ov0, teacher, model.rho, dtype=dtype)
    sim = simulate(model, hp, dim=dim, seeds=seed_list, times=times, init=winit,
                   init_std=init_std, dtype=dtype, progress=progress)
    return np.asarray(sim.steps), sim.overlaps


@simulate_states.register(Model)
def _simulate_states(model: Model, cfg: Config, *, dim: int, seeds: list[int],
                     times: np.ndarray, start: Any, progress: bool
                     ) -> tuple[np.ndarray, Overlaps]:
    return sgd_overlaps(cfg, dim=dim, seed_list=seeds, times=times, start=start,
                        progress=progress)
