"""The one driver of every simulation: [`simulate_sgd`][] runs a model's online SGD (its exact
maps, `headflow.dynamics.models.AbstractSGD`) over seeds through [`run_segments`][], which runs
the compiled segments (sharding, progress, interrupt, divergence check); and what they share,
the random keys of a run and the steps of its save times."""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from headflow.dynamics import HeadflowError, check_stop
from headflow.dynamics.models import AbstractSGD
from headflow.dynamics.sharding import gather, shard_batch


def seed_keys(seed: int):
    """`(teacher, init, data)` keys of one run."""
    return jr.split(jr.key(seed), 3)


def save_steps(times, D: int) -> np.ndarray:
    """Steps `round(t·D)` of the save times `t` (made non-decreasing)."""
    steps = np.rint(np.asarray(times, dtype=np.float64) * D).astype(np.int64)
    return np.maximum.accumulate(steps)


def segment_plan(steps_at: np.ndarray, segments: int) -> tuple[np.ndarray, np.ndarray]:
    """The save points cut into at most `segments` device calls: `(starts, counts)`, each
    `(n_seg, seg)`, the step each save interval starts at and its number of steps (padding:
    zero steps at the last save point)."""
    T = len(steps_at)
    counts = np.diff(steps_at, prepend=0)
    starts = steps_at - counts
    n_seg = max(1, min(segments, T))
    seg = math.ceil(T / n_seg)
    pad = n_seg * seg - T
    starts = np.concatenate([starts, np.full(pad, steps_at[-1])]).reshape(n_seg, seg)
    counts = np.concatenate([counts, np.zeros(pad, np.int64)]).reshape(n_seg, seg)
    return starts, counts


Segment = Callable[[Any, Any, Any, Any], tuple[Any, Any]]
"""`segment(carry, data, starts, counts) -> (carry, recorded)`: one compiled call that advances
every seed's `carry` through the save intervals `starts`, `counts` (arrays of one row of
[`segment_plan`][]) with its per-seed `data` (keys, teachers), and returns what it recorded at
their ends (leaves `(seeds, intervals, ...)`)."""

Check = Callable[[Any, Any, float], None]
"""`check(carry, recorded, t_end)`: raises [`headflow.dynamics.DivergenceError`][] when a seed
diverged in the segment that ends at `t = t_end` (or reached a state it cannot go on from)."""


def run_segments(segment: Segment, carry: Any, data: Any, steps_at: np.ndarray, *, dim: int,
                 seeds: int, segments: int, check: Check, progress: bool = False,
                 desc: str = "SGD") -> tuple[Any, Any]:
    """Run a simulation of `seeds` seeds to the save steps `steps_at`, cut into at most
    `segments` device calls: `carry` and `data` sharded over the devices and processes
    ([`headflow.dynamics.sharding`][]); between calls, a stop request honoured
    ([`headflow.dynamics.check_stop`][]), `check` run on what was recorded, and a progress bar
    on stderr when `progress`. **Returns:** the final `carry` and everything recorded, leaves
    `(seeds, len(steps_at), ...)`, both still sharded (`headflow.dynamics.sharding.gather`
    collects them)."""
    carry, data = shard_batch((carry, data), seeds)
    T = len(steps_at)
    starts, counts = segment_plan(steps_at, segments)
    n_seg, seg = starts.shape
    bar = None
    if progress:         # imported here: tqdm.auto warns in a notebook kernel without widgets
        from tqdm.auto import tqdm
        bar = tqdm(total=int(steps_at[-1]), unit="step", desc=f"{desc} D={dim} x{seeds}",
                   file=sys.stderr, leave=False)
    recorded = []
    try:
        for i in range(n_seg):
            check_stop()
            carry, rec = segment(carry, data, jnp.asarray(starts[i]), jnp.asarray(counts[i]))
            recorded.append(rec)
            check(carry, rec, float(steps_at[min((i + 1) * seg, T) - 1]) / dim)
            if bar is not None:
                bar.update(int(counts[i].sum()))
    finally:
        if bar is not None:
            bar.close()
    return carry, jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=1)[:, :T], *recorded)


def simulate_sgd(sgd: AbstractSGD, *, seeds, times, progress: bool = False,
                 segments: int = 20) -> tuple[np.ndarray, Any, Any, Any]:
    """Online SGD of `sgd` (a model's exact maps in one space), one run per seed of `seeds`
    (seed `s`: the keys `seed_keys(s)`), recorded at the save `times` (in
    `t = steps/D`, after `round(t·D)` steps) in at most `segments` device calls.

    **Returns:** `(steps at the save times, final carry, data, recorded)`: what was recorded
    gathered (leading axis: the seeds); the carry and the data as the segments left them,
    still sharded (`headflow.dynamics.sharding.gather` collects what a caller keeps, so the
    D-dimensional weights of every seed are collected only where they are wanted)."""
    seeds = [int(s) for s in seeds]
    steps_at = save_steps(np.asarray(times, dtype=np.float64).reshape(-1), sgd.dim)
    if len(steps_at) == 0 or steps_at[0] < 0:
        raise HeadflowError("times must be a non-empty list of save times >= 0")
    n = len(seeds)
    carry, data = sgd.start(jnp.stack([seed_keys(s) for s in seeds]), seeds)
    carry, recorded = run_segments(sgd.segment, carry, data, steps_at, dim=sgd.dim, seeds=n,
                                   segments=segments,
                                   check=functools.partial(sgd.check, seeds=seeds),
                                   progress=progress, desc=sgd.desc)
    return steps_at, carry, data, gather(recorded, n)
