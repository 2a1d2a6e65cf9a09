"""The attention model's online SGD over seeds in weight space ([`simulate`][]) or exactly in
law in overlap space ([`simulate_overlaps`][]), recording the overlaps on a time grid: its maps
(`headflow.dynamics.models.attention.AttentionWeightSGD`, `AttentionChainSGD`) run by the one
driver of `headflow.sims`, as [`headflow.sims.run_sgd`][] runs them for a config."""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

from headflow.dynamics import Model, Overlaps, StepSizes, Teacher, Weights, require_x64
from headflow.dynamics.expectations import MonteCarlo
from headflow.dynamics.models.attention import (AttentionChainSGD, AttentionWeightSGD,
                                                trajectory_risk)
from headflow.dynamics.sharding import gather

from .._runs import simulate_sgd


class Simulation(eqx.Module):
    """What [`simulate`][] recorded: the save times `t (T)` (in `steps/D`) and their `steps`,
    the overlaps (leaves `(S, T, ...)`), and the teachers and final weights of every seed."""

    t: Float[Array, " T"]
    steps: Int[Array, " T"]
    overlaps: Overlaps
    teachers: Teacher
    weights: Weights


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
    sgd = AttentionWeightSGD(model=model, hp=hp, dim=int(dim), init=init,
                             init_std=tuple(init_std), dtype=dtype)
    steps_at, w, (teachers, _), recorded = simulate_sgd(sgd, seeds=seeds, times=times,
                                                         progress=progress, segments=segments)
    teachers, w = gather((teachers, w), len(seeds))
    return Simulation(t=jnp.asarray(steps_at / dim), steps=jnp.asarray(steps_at),
                      overlaps=sgd.states(recorded), teachers=teachers, weights=w)


def simulate_overlaps(model: Model, hp: StepSizes, *, dim: int, seeds, times,
                      init: Overlaps | Callable[[PRNGKeyArray], Overlaps] | None = None,
                      init_std: tuple[float, float, float] = (0.1, 0.1, 0.0),
                      progress: bool = False, segments: int = 20, block: int = 128
                      ) -> Overlaps:
    """Online SGD simulated exactly in law through its overlaps (`docs/overlap-sgd.md`): the
    counterpart of [`headflow.sims.attention.simulate`][] at a cost per step independent of `dim`,
    in float64.

    **Arguments:**

    - `model`, `hp`: the model and the SGD step sizes (learning rates, weight decay, batch).
    - `dim`: D (at least `N + B·L + 1`, `n_rows`). `seeds`: a list of ints (one
      independent run each; the same seed gives the same run, bit for bit).
    - `times`: save times in `t = steps/D`, recorded after `round(t·D)` steps exactly as
      [`headflow.sims.attention.simulate`][] does (0 = the initial state).
    - `init`: `None` (a draw of the exact finite-D law of the random initialization with
      `init_std = (σ_k, σ_v, b_0)`, `initial_gram`), overlaps with a leading seed axis, or a
      callable `init(key) -> Overlaps` (e.g. `headflow.dynamics.models.attention.random_start` of
      actual weights).
      With frozen values the value blocks of the initial overlaps are ignored (`v_h = v*`).
    - `progress`: a progress bar on stderr. `segments`: device calls the run is cut into
      (failures are checked after each; the results do not depend on it).
    - `block`: steps whose random numbers are drawn together (speed; it is part of the random
      stream, so the same seeds give the same run for the same `block`).

    **Returns:** the [`headflow.dynamics.Overlaps`][] (cross overlaps included) with leaves `(S, T,
    ...)`.

    **Raises:** [`headflow.dynamics.DivergenceError`][] (one line, naming the seed and time) when
    the overlaps become NaN/inf, exceed `headflow.dynamics.ode.BLOWUP` or stop being a valid Gram
    matrix; [`headflow.dynamics.HeadflowError`][] when float64 is off or `dim` is too small.
    """
    sgd = AttentionChainSGD(model=model, hp=hp, dim=int(dim), init=init,
                            init_std=tuple(init_std), block=block)
    _, _, _, recorded = simulate_sgd(sgd, seeds=seeds, times=times, progress=progress,
                                     segments=segments)
    return sgd.states(recorded)


def recorded_risk(model: Model, ov: Overlaps, *, samples: int = 8192, seed: int = 0
                  ) -> tuple[Float[Array, "*batch"], Float[Array, "*batch"]]:
    """Population risk and its Monte Carlo error for overlaps with any leading batch axes
    (fixed nodes for all of them: common random numbers), by the ODE's risk along a trajectory
    ([`headflow.dynamics.models.attention.trajectory_risk`][]) over the flattened batch."""
    batch_shape = ov.b.shape[:-1]
    flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[len(batch_shape):]), ov)
    risk, err = trajectory_risk(model, flat, MonteCarlo(samples=samples, seed=seed),
                                manifold=False)
    return risk.reshape(batch_shape), err.reshape(batch_shape)
