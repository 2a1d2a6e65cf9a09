"""Initial order-parameter states."""

from __future__ import annotations

import jax.numpy as jnp
import jax.random as jr
import equinox as eqx
from jaxtyping import Array, Float, PRNGKeyArray

from ..._model import AttentionBase
from ..._overlaps import Overlaps
from ..._teacher import make_teacher
from ..._weights import init_weights


def symmetric_start(model: AttentionBase, *, key_std: float | Float[Array, ""],
                    value_std: float | Float[Array, ""],
                    bias: float | Float[Array, ""]) -> Overlaps:
    """The D → ∞ limit of the random initialization: `m = 0, n = 0, q = σ_k² I, s = σ_v² I`.
    All heads are equal in law, and the ODE started here stays on the symmetric subspace (it
    never specializes)."""
    H, F = model.H, model.F
    return Overlaps.manifold(m=jnp.zeros((H, F)), q=key_std**2 * jnp.eye(H),
                             n=jnp.zeros(H), s=value_std**2 * jnp.eye(H),
                             b=jnp.full((H,), bias))


def random_start(model: AttentionBase, key: PRNGKeyArray, dim: int, *,
                 key_std: float | Float[Array, ""], value_std: float | Float[Array, ""],
                 bias: float | Float[Array, ""]) -> Overlaps:
    """The overlaps of one random initialization at dimension `dim` (exact finite-D law: a random
    teacher and `k_h ~ N(0, σ_k² I)`, `v_h ~ N(0, σ_v² I)`), so head differences are
    `O(1/√dim)` and specialization can happen. Cross overlaps included (`.on_manifold()` drops
    them)."""
    kt, kw = jr.split(key)
    teacher = make_teacher(kt, dim, model.F, model.rho, dtype=jnp.float64)
    w = init_weights(kw, model.H, dim, key_std=key_std, value_std=value_std, bias=bias,
                     dtype=jnp.float64)
    if not model.train_values:
        w = type(w)(K=w.K, V=jnp.broadcast_to(teacher.vstar, w.V.shape), b=w.b)
    return w.overlaps(teacher)


def initial_overlaps(model: AttentionBase, key: PRNGKeyArray, dim: int, *, init: str,
                     key_std: float | Float[Array, ""], value_std: float | Float[Array, ""],
                     bias: float | Float[Array, ""], manifold: bool) -> Overlaps:
    """The start of the ODE that `[ode] init` names: `"symmetric"` ([`symmetric_start`][], with
    `n = ρ*`, `s = ρ*` when values are frozen) or `"random"` ([`random_start`][] at `dim` from
    `key`, cross overlaps dropped when `manifold`). Pure JAX, so differentiable in the scales
    `key_std`, `value_std` and `bias`."""
    if init == "symmetric":
        ov = symmetric_start(model, key_std=key_std, value_std=value_std, bias=bias)
        if not model.train_values:
            ov = eqx.tree_at(lambda o: (o.n, o.s), ov,
                             (jnp.full(model.H, model.rho), jnp.full((model.H,) * 2, model.rho)))
        return ov
    ov = random_start(model, key, dim, key_std=key_std, value_std=value_std, bias=bias)
    return ov.on_manifold() if manifold else ov
