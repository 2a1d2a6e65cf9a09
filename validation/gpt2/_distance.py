"""Theorem 1: distance collapse of the selected context vector.

Readings and proof: docs/gpt2.md, "Theorem 1: which reading".

For one row with weights `α` over `L` visible tokens `x_j` and a selected set `I` of size N, the
context vector is `s = Σ_{j∈I} α_j x_j` (not renormalized) and the distance is
`d̃ = Σ_{i∉I} ‖α_i x_i − s‖` (or, with `reading="norm"`, `‖Σ_{i∉I} α_i x_i − s‖`).

Nothing of size `rows × tokens × dim` is formed: `‖α_i x_i − s‖² = α_i²‖x_i‖² − 2α_i x_i·s + ‖s‖²`
with `s = (α ⊙ 1_I) X` and `x_i·s = (s Xᵀ)_i`: two matrix products per head and N.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from ._linalg import dot, lead, safe_sqrt
from ._selection import gather_pairs, gather_tokens, random_ranks, visible_mask


def _align(alpha, x, context, *masks):
    """Give the row arrays one rank: `alpha` and the `masks` `(*batch, rows, tokens)`, `x`
    `(*batch, tokens, dim)` with the same number of batch axes (size 1 where shared), `context`
    `(*batch, rows)`; `alpha` and the masks are broadcast to one shape."""
    context = jnp.asarray(context)
    ndim = max(alpha.ndim, x.ndim, context.ndim + 1, *(m.ndim for m in masks))
    shape = jnp.broadcast_shapes(*(lead(a, ndim).shape for a in (alpha, *masks)))
    alpha, *masks = (jnp.broadcast_to(lead(a, ndim), shape) for a in (alpha, *masks))
    return (alpha, lead(x, ndim), lead(context, ndim - 1), *masks)


def _left_out(selected, context):
    visible = visible_mask(context, selected.shape[-1])
    return (
        jnp.broadcast_to(visible, jnp.broadcast_shapes(visible.shape, selected.shape)) & ~selected
    )


def distances_to_context(
    alpha: Float[Array, "*#batch rows tokens"],
    x: Float[Array, "*#batch tokens dim"],
    selected: Bool[Array, "*#batch rows tokens"],
) -> Float[Array, "*#batch rows tokens"]:
    """`‖α_i x_i − s‖` for every token i, with `s = Σ_{j∈I} α_j x_j` (Gram identity)."""
    alpha, x, _, selected = _align(alpha, x, jnp.zeros(alpha.shape[:-1], jnp.int32), selected)
    s = dot("...rt,...td->...rd", jnp.where(selected, alpha, 0), x)
    ss = jnp.sum(s * s, axis=-1, keepdims=True)
    xs = dot("...rd,...td->...rt", s, x)
    gx = jnp.sum(x * x, axis=-1)[..., None, :]
    return safe_sqrt(alpha * alpha * gx - 2 * alpha * xs + ss)


def selection_distance(
    alpha: Float[Array, "*#batch rows tokens"],
    x: Float[Array, "*#batch tokens dim"],
    selected: Bool[Array, "*#batch rows tokens"],
    context: Int[Array, "*#batch rows"],
    *,
    reading: str = "sum",
) -> Float[Array, "*#batch rows"]:
    """The distance `d̃` between the context vector of `I` and the non-selected tokens.

    **Arguments:**

    - `alpha`: attention weights (rows sum to one over the visible tokens).
    - `x`: token vectors (values by default, docs/gpt2.md "Notation").
    - `selected`: the set I, e.g. [`topn_mask`][] or `random_ranks(...) < N`.
    - `context`: visible tokens per row, `L_t`.
    - `reading`: `"sum"` (default, `Σ_{i∉I} ‖α_i x_i − s‖`) or `"norm"` (`‖Σ_{i∉I} α_i x_i − s‖`).

    **Returns:** `d̃` per row. Where I holds every visible token the sum reading is exactly 0,
    and the norm reading is `‖s‖` (the norm of an empty sum minus s): only the sum reading
    collapses as N → L.
    """
    alpha, x, context, selected = _align(alpha, x, context, selected)
    out = _left_out(selected, context)
    if reading == "norm":
        diff = dot(
            "...rt,...td->...rd", jnp.where(out, alpha, 0) - jnp.where(selected, alpha, 0), x
        )
        return jnp.linalg.norm(diff, axis=-1)
    if reading != "sum":
        raise ValueError(f"reading must be 'sum' or 'norm', got {reading!r}")
    return jnp.sum(jnp.where(out, distances_to_context(alpha, x, selected), 0), axis=-1)


class FixedSetBound(eqx.Module):
    """Theorem 1's fixed-set bound and its ingredients, per row.

    - `bound`: the bound on `d̃` of the reading asked for. Sum reading:
      `(1 − ᾱ_N) d_1 + [(L − N) − (1 − ᾱ_N)/ᾱ_N] ‖s‖`; norm reading:
      `(1 − ᾱ_N) d_1 + |1 − 2ᾱ_N| ‖s‖/ᾱ_N`.
    - `bound_max`: the weaker form with `‖s‖ ≤ ᾱ_N max_{j∈I} ‖x_j‖`; sum reading:
      `(1 − ᾱ_N) d_1 + [(L − N) ᾱ_N − (1 − ᾱ_N)] max_{j∈I} ‖x_j‖`.
    - `d1`: `max_{i∉I, j∈I} ‖x_i − x_j‖` (0 when nothing is left out), or an upper bound on it
      where `d1_exact` is False (see [`left_out_diameter`][]).
    - `mass`: `ᾱ_N`; `s_norm`: `‖s‖`.
    """

    bound: Float[Array, "*#batch rows"]
    bound_max: Float[Array, "*#batch rows"]
    d1: Float[Array, "*#batch rows"]
    d1_exact: Bool[Array, "*#batch rows"]
    mass: Float[Array, "*#batch rows"]
    s_norm: Float[Array, "*#batch rows"]


def _pairwise_sq(x):
    gx = jnp.sum(x * x, axis=-1)
    return gx[..., :, None] + gx[..., None, :] - 2 * dot("...td,...ud->...tu", x, x)


def distance_tables(
    x: Float[Array, "*#batch tokens dim"],
) -> tuple[Float[Array, "*#batch tokens tokens"], Float[Array, "*#batch tokens tokens"]]:
    """`(sq, far)`: squared pairwise distances and their running maximum over the token index,
    `far[j, c] = max_{i ≤ c} ‖x_i − x_j‖²` (for [`left_out_diameter`][] with `exact=False`)."""
    sq = _pairwise_sq(x)
    return sq, jax.lax.cummax(sq, axis=sq.ndim - 1)


def left_out_diameter(
    x: Float[Array, "*#batch tokens dim"],
    selected: Bool[Array, "*#batch rows tokens"],
    context: Int[Array, "*#batch rows"],
    members: Int[Array, "*#batch rows k"],
    *,
    exact: bool = True,
    tables=None,
) -> tuple[Float[Array, "*#batch rows"], Bool[Array, "*#batch rows"]]:
    """`d_1 = max_{i∉I, j∈I} ‖x_i − x_j‖` over the visible tokens.

    **Arguments:**

    - `x`, `selected`, `context`: as in [`selection_distance`][].
    - `members`: for every row, the indices of the selected tokens first (e.g. `order[..., :k]`
      from [`topn_order`][], k ≥ N); entries beyond the row's `|I|` are ignored.
    - `exact`: `True` computes every selected-left-out distance, one `(rows·k) × dim × tokens`
      product. `False` uses one `tokens × tokens` table per head: with
      `far_j = max_{i visible} ‖x_i − x_j‖` (a running maximum over the visible prefix),
      `max_{j∈I} far_j = max(d_1, diam I)`, which is `d_1` exactly whenever it exceeds the
      diameter of I and an upper bound on it otherwise, for `rows × k²` work.

    - `tables`: [`distance_tables`][] of `x`, to share them between several sets.

    **Returns:** `(d_1, exact)` per row; where `exact` is False the value is an upper bound, which
    keeps Theorem 1's bound rigorous.
    """
    context = jnp.asarray(context)
    ndim = max(selected.ndim, x.ndim, context.ndim + 1, members.ndim)
    x, context = lead(x, ndim), lead(context, ndim - 1)
    selected, members = lead(selected, ndim), lead(members, ndim)
    k = members.shape[-1]
    n_sel = jnp.sum(selected, axis=-1, dtype=jnp.int32)
    is_member = lead(jnp.arange(k, dtype=jnp.int32), n_sel.ndim + 1) < n_sel[..., None]
    out = _left_out(selected, context)
    nothing_out = ~jnp.any(out, axis=-1)
    if exact:
        xm = gather_tokens(x, members)
        gm = jnp.sum(xm * xm, axis=-1)
        gx = jnp.sum(x * x, axis=-1)[..., None, None, :]
        sq = gm[..., None] + gx - 2 * dot("...rkd,...td->...rkt", xm, x)
        pair = is_member[..., :, None] & out[..., None, :]
        d1sq = jnp.max(jnp.where(pair, sq, 0), axis=(-2, -1))
        return jnp.where(nothing_out, 0, safe_sqrt(d1sq)), jnp.ones(d1sq.shape, bool)
    sq, far = distance_tables(x) if tables is None else tables
    sq, far = lead(sq, ndim), lead(far, ndim)
    last = jnp.broadcast_to(jnp.asarray(context, jnp.int32) - 1, n_sel.shape)[..., None]
    far_m = gather_pairs(far, members, last)[..., 0]
    reach = jnp.max(jnp.where(is_member, far_m, 0), axis=-1)
    within = gather_pairs(sq, members, members)
    inside = is_member[..., :, None] & is_member[..., None, :]
    diam = jnp.max(jnp.where(inside, within, 0), axis=(-2, -1))
    exact_rows = (reach > diam) | nothing_out
    return jnp.where(nothing_out, 0, safe_sqrt(reach)), exact_rows


def fixed_set_bound(
    alpha: Float[Array, "*#batch rows tokens"],
    x: Float[Array, "*#batch tokens dim"],
    selected: Bool[Array, "*#batch rows tokens"],
    context: Int[Array, "*#batch rows"],
    members: Int[Array, "*#batch rows k"],
    *,
    exact: bool = True,
    tables=None,
    reading: str = "sum",
) -> FixedSetBound:
    """Theorem 1's rigorous upper bound on `d̃` for a fixed selected set (weights `α ≥ 0`).

    Proof (docs/gpt2.md, "Theorem 1: which reading"): with `ŝ = s/ᾱ_N`, a convex combination of
    the selected tokens, `‖x_i − ŝ‖ ≤ d_1` for every left-out i, and

    - sum reading: `α_i x_i − s = α_i (x_i − ŝ) + (α_i/ᾱ_N − 1) s` for each left-out i; for the
      top-N set `α_i ≤ ᾱ_N` and summing gives the bound. For any other set the coefficient is
      kept as `|1 − α_i/ᾱ_N|`, which equals it for top-N sets and keeps the bound valid. The
      bound is attained when all token vectors coincide.
    - norm reading: `Σ_{i∉I} α_i x_i − s = Σ_{i∉I} α_i (x_i − ŝ) + (Σ_{i∉I} α_i − ᾱ_N) ŝ`.

    `1 − ᾱ_N` is computed as the left-out mass `Σ_{i∉I} α_i` (equal for normalized weights, and
    what the proof uses for weights that do not sum to one).

    **Arguments:**

    - `alpha`, `x`, `selected`, `context`: as in [`selection_distance`][].
    - `members`, `exact`, `tables`: how `d_1` is computed, see [`left_out_diameter`][].
    - `reading`: `"sum"` (default) or `"norm"`, as in [`selection_distance`][].

    **Returns:** a [`FixedSetBound`][].
    """
    if reading not in ("sum", "norm"):
        raise ValueError(f"reading must be 'sum' or 'norm', got {reading!r}")
    alpha, x, context, selected = _align(alpha, x, context, selected)
    members = lead(members, alpha.ndim)
    out = _left_out(selected, context)
    w = jnp.where(selected, alpha, 0)
    mass = jnp.sum(w, axis=-1)
    rest = jnp.sum(jnp.where(out, alpha, 0), axis=-1)
    s = dot("...rt,...td->...rd", w, x)
    s_norm = jnp.linalg.norm(s, axis=-1)
    safe_mass = jnp.where(mass > 0, mass, 1)
    d1, d1_exact = left_out_diameter(x, selected, context, members, exact=exact, tables=tables)
    k = members.shape[-1]
    n_sel = jnp.sum(selected, axis=-1, dtype=jnp.int32)
    is_member = lead(jnp.arange(k, dtype=jnp.int32), n_sel.ndim + 1) < n_sel[..., None]
    gm = jnp.sum(gather_tokens(x, members) ** 2, axis=-1)
    xmax = safe_sqrt(jnp.max(jnp.where(is_member, gm, 0), axis=-1))
    if reading == "sum":
        coef = jnp.sum(jnp.where(out, jnp.abs(1 - alpha / safe_mass[..., None]), 0), axis=-1)
        bound = rest * d1 + coef * s_norm
        bound_max = rest * d1 + coef * mass * xmax
    else:
        gap = jnp.abs(rest - mass)
        bound = rest * d1 + gap * s_norm / safe_mass
        bound_max = rest * d1 + gap * xmax
    return FixedSetBound(
        bound=bound, bound_max=bound_max, d1=d1, d1_exact=d1_exact, mass=mass, s_norm=s_norm
    )


def random_set_distance(
    alpha: Float[Array, "*#batch rows tokens"],
    x: Float[Array, "*#batch tokens dim"],
    context: Int[Array, "*#batch rows"],
    n: int | Int[Array, ""],
    *,
    reading: str = "sum",
) -> Float[Array, "*#batch rows"]:
    """Closed-form (Jensen) estimate of `E[d̃]` for a uniformly random N-subset (docs/gpt2.md,
    "Decisions").

    `E[d̃] ≈ ((L−N)/L) Σ_i ‖α_i x_i − (N/(L−1)) Σ_{j≠i} α_j x_j‖`: token i is left out with
    probability `(L−N)/L`, and given that, `E[s] = (N/(L−1)) Σ_{j≠i} α_j x_j`; since the norm is
    convex the exact expectation is at least this value (Jensen gap ≥ 0). With `u = Σ_j α_j x_j`
    each term is `‖(1 + c) α_i x_i − c u‖`, `c = N/(L−1)`.

    With `reading="norm"` the same argument gives `‖E[Σ_{i∉I} α_i x_i − s]‖ = |L − 2N|/L ‖u‖`.

    **Returns:** the estimate per row; for rows with `L_t ≤ N` (every token selected) the exact
    value, 0 in the sum reading and `‖u‖` in the norm reading.
    """
    alpha, x, context = _align(alpha, x, context)
    visible = jnp.broadcast_to(visible_mask(context, alpha.shape[-1]), alpha.shape)
    w = jnp.where(visible, alpha, 0)
    u = dot("...rt,...td->...rd", w, x)
    if reading == "norm":
        lt = jnp.asarray(context).astype(alpha.dtype)
        n = jnp.minimum(jnp.asarray(n, alpha.dtype), lt)
        return jnp.abs(lt - 2 * n) / lt * jnp.linalg.norm(u, axis=-1)
    if reading != "sum":
        raise ValueError(f"reading must be 'sum' or 'norm', got {reading!r}")
    uu = jnp.sum(u * u, axis=-1, keepdims=True)
    xu = dot("...rd,...td->...rt", u, x)
    gx = jnp.sum(x * x, axis=-1)[..., None, :]
    lt = jnp.asarray(context).astype(alpha.dtype)
    n = jnp.asarray(n, alpha.dtype)
    c = (n / jnp.maximum(lt - 1, 1))[..., None]
    terms = safe_sqrt((1 + c) ** 2 * w * w * gx - 2 * c * (1 + c) * w * xu + c * c * uu)
    total = jnp.sum(jnp.where(visible, terms, 0), axis=-1)
    return jnp.where(lt > n, (lt - n) / lt * total, 0)


def random_set_distance_mc(
    key: PRNGKeyArray,
    alpha: Float[Array, "*#batch rows tokens"],
    x: Float[Array, "*#batch tokens dim"],
    context: Int[Array, " rows"],
    n: int | Int[Array, ""],
    *,
    samples: int = 16,
    reading: str = "sum",
) -> tuple[Float[Array, "*#batch rows"], Float[Array, "*#batch rows"]]:
    """Monte Carlo `E[d̃]` over uniformly random N-subsets of each row's visible tokens.

    **Arguments:** as [`selection_distance`][], plus a PRNG `key`, N and the number of `samples`.

    **Returns:** `(mean, standard error)` per row.
    """

    def one(k):
        selected = random_ranks(k, context, alpha.shape[-1]) < n
        return selection_distance(alpha, x, selected, context, reading=reading)

    draws = jax.lax.map(one, jax.random.split(key, samples))
    mean = jnp.mean(draws, axis=0)
    if samples < 2:
        return mean, jnp.zeros_like(mean)
    return mean, jnp.std(draws, axis=0, ddof=1) / jnp.sqrt(samples)


def topn_distances(
    alpha: Float[Array, "*#batch rows tokens"],
    x: Float[Array, "*#batch tokens dim"],
    ranks: Int[Array, "*#batch rows tokens"],
    context: Int[Array, "*#batch rows"],
    ns: Int[Array, " k"],
    *,
    reading: str = "sum",
) -> Float[Array, "*#batch rows k"]:
    """[`selection_distance`][] of the sets `{ranks < N}` for every N in `ns` (one sort, no
    per-N recomputation of anything but the two matrix products).

    **Returns:** `d̃` with a trailing axis over `ns`.
    """

    def one(n):
        return selection_distance(alpha, x, ranks < n, context, reading=reading)

    return jnp.moveaxis(jax.lax.map(one, jnp.asarray(ns, jnp.int32)), 0, -1)


def random_set_distances(
    alpha: Float[Array, "*#batch rows tokens"],
    x: Float[Array, "*#batch tokens dim"],
    context: Int[Array, "*#batch rows"],
    ns: Int[Array, " k"],
    *,
    reading: str = "sum",
) -> Float[Array, "*#batch rows k"]:
    """[`random_set_distance`][] for every N in `ns`; the products `u Xᵀ` are shared by all N."""
    if reading != "sum":
        return jnp.moveaxis(
            jax.lax.map(
                lambda n: random_set_distance(alpha, x, context, n, reading=reading),
                jnp.asarray(ns, jnp.int32),
            ),
            0,
            -1,
        )
    alpha, x, context = _align(alpha, x, context)
    visible = jnp.broadcast_to(visible_mask(context, alpha.shape[-1]), alpha.shape)
    w = jnp.where(visible, alpha, 0)
    u = dot("...rt,...td->...rd", w, x)
    uu = jnp.sum(u * u, axis=-1, keepdims=True)
    xu = dot("...rd,...td->...rt", u, x)
    gx = jnp.sum(x * x, axis=-1)[..., None, :]
    lt = jnp.asarray(context).astype(alpha.dtype)
    ww = w * w * gx
    wxu = w * xu

    def one(n):
        n = n.astype(alpha.dtype)
        c = (n / jnp.maximum(lt - 1, 1))[..., None]
        terms = safe_sqrt((1 + c) ** 2 * ww - 2 * c * (1 + c) * wxu + c * c * uu)
        total = jnp.sum(jnp.where(visible, terms, 0), axis=-1)
        return jnp.where(lt > n, (lt - n) / lt * total, 0)

    return jnp.moveaxis(jax.lax.map(one, jnp.asarray(ns, jnp.int32)), 0, -1)
