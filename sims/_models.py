"""Online SGD of a model of the family (`docs/models.md`) at finite D, in weight space and
exactly in law in overlap space, over seeds: [`simulate_model`][], the family's maps
(`headflow.dynamics.models.WeightSGD`, `headflow.dynamics.models.ChainSGD`) run by the one
driver."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from headflow.dynamics import StepSizes
from headflow.dynamics.models import AbstractModel, GramState, family_sgd

from ._runs import simulate_sgd


def simulate_model(model: AbstractModel, hp: StepSizes, *, dim: int, seeds, times,
                   space: str = "weights", init: GramState | None = None,
                   dtype: Any = jnp.float32, progress: bool = False,
                   segments: int = 20) -> GramState:
    """Online SGD of `model` for every seed, recording `(Ω, params)` at the save times.

    **Arguments:** `hp` the step sizes; `dim` D; `seeds` a list of ints (seed `s`: its
    initialization from `fold_in`-free keys of `s`, its data from another); `times` in
    `t = steps/D` (recorded after `round(t·D)` steps); `space` `"weights"` (D-dimensional
    weights in `dtype`) or `"overlaps"` (the exact chain, float64; its start is the Gram matrix
    of the same initial weights); `init` one state to start every seed from (None: the model's
    random initialization); `progress` a bar on stderr.

    **Returns:** the states, leaves `(S, T, ...)` (float64).

    **Raises:** [`headflow.dynamics.DivergenceError`][] when a run becomes NaN/inf or exceeds
    `headflow.dynamics.ode.BLOWUP` (or, in overlap space, its Gram matrix stops being PSD).
    """
    sgd = family_sgd(model, hp, dim=dim, space=space, init=init, dtype=dtype)
    _, _, _, recorded = simulate_sgd(sgd, seeds=seeds, times=times, progress=progress,
                                     segments=segments)
    return sgd.states(recorded)
