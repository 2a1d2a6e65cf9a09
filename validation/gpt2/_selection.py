"""Visible tokens and top-N / random selections of attention rows (docs/gpt2.md, "Notation").

Conventions shared by all bound functions: attention weights `alpha` are `(*batch, rows, tokens)`
(row = query); token vectors `x` are `(*batch, tokens, dim)`, shared by the rows; `context` gives
for each row the number of visible tokens `L_t` (tokens `0..L_t−1`; causal attention has
`L_t = t + 1`). A selected set `I` is a boolean mask `(*batch, rows, tokens)`.

The top-N set `I_N` holds the N largest visible weights of a row, ties broken by the lower token
index (rows with `L_t ≤ N` select all their visible tokens). One sort per row gives `order` (token
indices by decreasing weight, visible first) and `ranks` (its inverse; invisible tokens get rank
`tokens`), and then `I_N = {ranks < N}` for every N, and `order[..., :k]` lists the members of
every `I_N` with `N ≤ k`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from ._linalg import lead


def causal_context(rows: int, *, dtype=jnp.int32) -> Int[Array, " rows"]:
    """`L_t = t + 1`: the number of keys query `t` sees under a causal mask."""
    return jnp.arange(1, rows + 1, dtype=dtype)


def visible_mask(
    context: Int[Array, "*#batch rows"], tokens: int
) -> Bool[Array, "*#batch rows tokens"]:
    """`visible[..., t, j] = j < context[..., t]`."""
    context = jnp.asarray(context)[..., None]
    return lead(jnp.arange(tokens, dtype=jnp.int32), context.ndim) < context


def _inverse(order, visible):
    tokens = order.shape[-1]
    positions = jnp.broadcast_to(jnp.arange(tokens, dtype=jnp.int32), order.shape)
    flat_o = order.reshape(-1, tokens)
    flat_p = positions.reshape(-1, tokens)
    ranks = jax.vmap(lambda o, p: jnp.zeros_like(o).at[o].set(p))(flat_o, flat_p).reshape(
        order.shape
    )
    return jnp.where(visible, ranks, jnp.int32(tokens))


def topn_order(
    alpha: Float[Array, "*#batch rows tokens"], context: Int[Array, "*#batch rows"]
) -> tuple[Int[Array, "*#batch rows tokens"], Int[Array, "*#batch rows tokens"]]:
    """Sort every row's visible tokens by decreasing weight (ties: lower index first).

    **Arguments:**

    - `alpha`: attention weights.
    - `context`: visible tokens per row.

    **Returns:** `(order, ranks)`: `I_N = {ranks < N}`; its members are `order[..., :min(N, L_t)]`.

    On CPU, [`topn_order_host`][] (numpy's vectorized sort) gives the same result several times
    faster; this version runs on any device and under `jit`.
    """
    context = jnp.asarray(context)
    ndim = max(alpha.ndim, context.ndim + 1)
    alpha = lead(alpha, ndim)
    visible = visible_mask(lead(context, ndim - 1), alpha.shape[-1])
    shape = jnp.broadcast_shapes(alpha.shape, visible.shape)
    alpha, visible = jnp.broadcast_to(alpha, shape), jnp.broadcast_to(visible, shape)
    order = jnp.argsort(jnp.where(visible, -alpha, jnp.inf), axis=-1, stable=True).astype(jnp.int32)
    return order, _inverse(order, visible)


def topn_order_host(alpha, context) -> tuple[np.ndarray, np.ndarray]:
    """[`topn_order`][] computed by numpy on the host (identical output).

    For float32 weights the sort key packs an integer image of the weight that preserves the
    order of floats of either sign (the bits, with those of negative floats reflected) and the
    token index into one int64, so one unstable, SIMD-accelerated sort breaks ties by index
    exactly as a stable sort would.
    """
    alpha = np.asarray(alpha)
    tokens = alpha.shape[-1]
    context = np.asarray(context)
    visible = np.arange(tokens) < context[..., None]
    index = np.arange(tokens, dtype=np.int64)
    if alpha.dtype == np.float32 and tokens < 2**30:
        canonical = np.where(alpha == 0, np.float32(0), alpha)  # −0.0 sorts as +0.0
        bits = canonical.view(np.int32)
        ordered = (bits ^ ((bits >> 31) & np.int32(0x7FFFFFFF))).astype(np.int64)
        ordered = np.where(visible, ordered, -(2**31) - 1)  # invisible tokens last
        shift = int(tokens - 1).bit_length()
        key = (-ordered << shift) | index
        key.sort(axis=-1)
        order = (key & ((1 << shift) - 1)).astype(np.int32)
    else:
        order = np.argsort(np.where(visible, -alpha, np.inf), axis=-1, kind="stable").astype(
            np.int32
        )
    ranks = np.empty_like(order)
    np.put_along_axis(
        ranks, order, np.broadcast_to(np.arange(tokens, dtype=np.int32), order.shape), axis=-1
    )
    ranks = np.where(visible, ranks, np.int32(tokens))
    return order, ranks


def topn_mask(
    alpha: Float[Array, "*#batch rows tokens"],
    context: Int[Array, "*#batch rows"],
    n: int | Int[Array, ""],
) -> Bool[Array, "*#batch rows tokens"]:
    """The top-N set `I_N` of every row (see [`topn_order`][] to share one sort among many N)."""
    return topn_order(alpha, context)[1] < n


def random_ranks(
    key: PRNGKeyArray, context: Int[Array, " rows"], tokens: int
) -> Int[Array, "rows tokens"]:
    """A uniformly random order of each row's visible tokens, as ranks.

    `ranks < N` is a uniformly random N-subset of the visible tokens (all of them when
    `L_t ≤ N`); invisible tokens get rank `tokens`. Broadcast over heads, whose expectations
    over subsets are each unaffected.
    """
    visible = visible_mask(context, tokens)
    u = jnp.where(visible, jr.uniform(key, visible.shape, dtype=jnp.float32), 2.0)
    order = jnp.argsort(u, axis=-1).astype(jnp.int32)
    return _inverse(order, visible)


def gather_tokens(
    x: Float[Array, "*#batch tokens dim"], index: Int[Array, "*#batch rows k"]
) -> Float[Array, "*#batch rows k dim"]:
    """`x[..., index[..., r, k], :]` for every row (a per-batch gather, no broadcast copy)."""
    batch = jnp.broadcast_shapes(x.shape[:-2], index.shape[:-2])
    xb = jnp.broadcast_to(x, batch + x.shape[-2:]).reshape((-1,) + x.shape[-2:])
    ib = jnp.broadcast_to(index, batch + index.shape[-2:]).reshape((-1,) + index.shape[-2:])
    out = jax.vmap(lambda xx, ii: xx[ii])(xb, ib)
    return out.reshape(batch + index.shape[-2:] + x.shape[-1:])


def gather_pairs(
    table: Float[Array, "*#batch tokens tokens"],
    rows_index: Int[Array, "*#batch rows a"],
    cols_index: Int[Array, "*#batch rows b"],
) -> Float[Array, "*#batch rows a b"]:
    """`table[..., rows_index[..., r, a], cols_index[..., r, b]]` (per-batch gather)."""
    batch = jnp.broadcast_shapes(table.shape[:-2], rows_index.shape[:-2], cols_index.shape[:-2])
    tb = jnp.broadcast_to(table, batch + table.shape[-2:]).reshape((-1,) + table.shape[-2:])
    rb = jnp.broadcast_to(rows_index, batch + rows_index.shape[-2:]).reshape(
        (-1,) + rows_index.shape[-2:]
    )
    cb = jnp.broadcast_to(cols_index, batch + cols_index.shape[-2:]).reshape(
        (-1,) + cols_index.shape[-2:]
    )
    out = jax.vmap(lambda t, r, c: t[r[:, :, None], c[:, None, :]])(tb, rb, cb)
    return out.reshape(batch + rows_index.shape[-2:] + cols_index.shape[-1:])
