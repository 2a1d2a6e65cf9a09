"""What both simulators share: the random keys of a run and the steps of its save times."""

from __future__ import annotations

import jax.random as jr
import numpy as np


def seed_keys(seed: int):
    """`(teacher, init, data)` keys of one run."""
    return jr.split(jr.key(seed), 3)


def save_steps(times, D: int) -> np.ndarray:
    """Steps `round(t·D)` of the save times `t` (made non-decreasing)."""
    steps = np.rint(np.asarray(times, dtype=np.float64) * D).astype(np.int64)
    return np.maximum.accumulate(steps)
