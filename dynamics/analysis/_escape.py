"""The escape time that linear stability predicts (`docs/phases.md`): the linearized head
spread of a random start at dimension D grows like `e^{∫λ}/√D`, so
`∫_0^{t_esc} λ(τ) dτ = ½ ln D + c`."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float

from ..measures import first_crossing
from .._model import AttentionBase
from ..models.attention import random_start
from ._tangent import StabilityResult


def initial_contrasts(model: Any, key, modes: Any, *, n: int, dim: int, key_std: float = 1.0,
                      value_std: float = 1.0, bias: float = 0.0) -> Float[Array, "n Hm1 mu"]:
    """Samples of the head- (unit-) difference coordinates of a random initialization at
    dimension `dim`, scaled by `√dim` (so they are `O(1)` and the perturbation at dimension D
    is `coef/√D`): `n` independent draws of the model's random start
    ([`headflow.dynamics.models.attention.random_start`][] with `key_std`, `value_std`, `bias`, or a
    family model's `initial_state`) projected on the blocks of `modes`."""
    return _contrasts(model, modes, jr.split(key, n), int(dim), float(key_std), float(value_std),
                      float(bias))


@eqx.filter_jit
def _contrasts(model: Any, modes: Any, keys, dim: int, key_std: float, value_std: float,
               bias: float):
    # a program per model structure and D (the draws' shapes), shared by every call

    def start(k):
        if isinstance(model, AttentionBase):
            return random_start(model, k, dim, key_std=key_std, value_std=value_std, bias=bias)
        return model.initial_state(k, dim)

    def one(k):
        ov = start(k)
        d = modes.flatten(ov) - modes.flatten(modes.average(ov))
        return jnp.einsum("knj,n->kj", modes.standard, d) * jnp.sqrt(float(dim))

    return jax.vmap(one)(keys)


def linear_spread(result: StabilityResult, modes: Any,
                  coef: Float[Array, "n Hm1 mu"]) -> np.ndarray:
    """The head (unit) spread `max_f (max_h α_hf − min_h α_hf)` of the linearized
    perturbations `δ(t) = Σ_k U_k Φ(t) coef_k` around the symmetric trajectory, `(n, T)`. The
    spread is positively homogeneous of degree 1, so at dimension D it is this divided by
    `√D`."""
    return np.asarray(_spreads(modes, coef, result.symmetric, result.propagator)).T


@eqx.filter_jit
def _spreads(modes: Any, coef, symmetric, propagator):
    # one program per shapes, shared by every call
    def at(ov, phi):
        c = jnp.einsum("ij,nkj->nki", phi, coef)                       # (n, H−1, μ)
        deltas = jnp.einsum("knj,mkj->mn", modes.standard, c)           # (n, N)

        def spread(d):
            # the spread is 0 on the symmetric trajectory: its derivative along d is the
            # spread of the derivative of the alignment
            _, da = jax.jvp(lambda v: modes.alignment(modes.unflatten(v)),
                            (modes.flatten(ov),), (d,))
            return jnp.max(jnp.max(da, axis=-2) - jnp.min(da, axis=-2))

        return jax.vmap(spread)(deltas)

    return jax.vmap(at)(symmetric, propagator)                          # (T, n)


def crossing_times(t: np.ndarray, values: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """[`headflow.dynamics.measures.first_crossing`][] of each row of `values (n, T)` through each
    of `levels (k)`, NaN where it never crosses: `(n, k)`."""
    out = np.full((values.shape[0], len(levels)), np.nan)
    for i, row in enumerate(values):
        for j, lev in enumerate(levels):
            c = first_crossing(t, row, lev)
            out[i, j] = np.nan if c is None else c
    return out


def predicted_escape_times(result: StabilityResult, modes: Any,
                           coef: Float[Array, "n Hm1 mu"], dims, threshold: float
                           ) -> np.ndarray:
    """Linear-theory escape times `(n, len(dims))`: the first time the linearized head spread of
    each initial draw, divided by `√D`, reaches `threshold` (NaN if not before the end of
    `result.t`). Since the spread grows like `e^{∫λ}`, this is `∫_0^{t_esc} λ = ½ ln D + c`."""
    spread = linear_spread(result, modes, coef)
    with np.errstate(divide="ignore"):
        logs = np.log(np.maximum(spread, 1e-300))
    levels = np.log(threshold) + 0.5 * np.log(np.asarray(dims, dtype=np.float64))
    return crossing_times(np.asarray(result.t), logs, levels)
