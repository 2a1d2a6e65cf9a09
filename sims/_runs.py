"""What both simulators share: the random keys of a run and the steps of its save times."""

from __future__ import annotations

import math

import jax.random as jr
import numpy as np


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
