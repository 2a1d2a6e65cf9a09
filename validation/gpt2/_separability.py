"""Theorem 2: geometric separability of the selected tokens (docs/gpt2.md, "The bounds").

Token vectors are put on the sphere of radius M (`x̂ = M x/‖x‖`). With `s = Σ_{j∈I} α_j x̂_j`,
`X_i = ‖s − α_i x̂_i‖` and `r = min_{j∉I} X_j`, the separable count is `N_s = #{i ∈ I : X_i < r}`.

With δ the minimum pairwise distance among the selected tokens (so `x̂_j·x̂_k ≤ M² − δ²/2`),
`X_i² ≤ ξ_i² = M²(ᾱ − α_i)² − (δ²/2) Σ_{j≠k ∈ I∖i} α_j α_k` deterministically, hence
`N_s/N ≥ 1 − Σ_{i∈I} ξ_i/(N r)` (from `1{X < r} ≥ 1 − X/r`). Duplicate tokens give δ = 0, for
which `ξ_i = M(ᾱ − α_i)` is the triangle inequality: the bound stays valid, only weaker.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Float, Int

from ._linalg import dot, lead, safe_sqrt
from ._selection import gather_pairs, visible_mask


class Separability(eqx.Module):
    """Theorem 2 quantities per row.

    - `ratio`: `N_s/N`.
    - `lower`: the rigorous lower bound `max(0, 1 − Σ_{i∈I} ξ_i/(N r))`.
    - `upper`: the heuristic Hoeffding-type value `(1/N) Σ_{i∈I} exp(−(ξ_i − r)_+²/(2M²))`.
    - `delta`: δ used (minimum pairwise distance of the selected, normalized tokens; 0 for
      duplicates or fewer than two selected).
    - `radius`: r (`inf` when nothing is left out).
    - `valid`: at least one visible token is left out (`L_t > N` for top-N).
    """

    ratio: Float[Array, "*#batch rows"]
    lower: Float[Array, "*#batch rows"]
    upper: Float[Array, "*#batch rows"]
    delta: Float[Array, "*#batch rows"]
    radius: Float[Array, "*#batch rows"]
    valid: Bool[Array, "*#batch rows"]


def sphere_normalize(x: Float[Array, "*#batch tokens dim"], radius: float = 1.0
                     ) -> Float[Array, "*#batch tokens dim"]:
    """`M x/‖x‖` (zero vectors stay zero, which keeps every bound valid)."""
    norm = jnp.linalg.norm(x, axis=-1, keepdims=True)
    return jnp.where(norm > 0, radius * x / jnp.where(norm > 0, norm, 1), 0)


def prefix_min_distance2(
    x: Float[Array, "*#batch tokens dim"], members: Int[Array, "*#batch rows k"]
) -> Float[Array, "*#batch rows k"]:
    """`D[..., n−1] = min_{a<b<n} ‖x_{m_a} − x_{m_b}‖²` over the first n `members` of each row
    (`inf` for n = 1), for every n ≤ k at once: one `tokens × tokens` distance table per head, a
    `k × k` gather per row and a running minimum, so δ of every top-N set costs what one does."""
    gx = jnp.sum(x * x, axis=-1)
    sq = jnp.maximum(gx[..., :, None] + gx[..., None, :] - 2 * dot("...td,...ud->...tu", x, x), 0)
    pairs = gather_pairs(sq, members, members)
    k = members.shape[-1]
    upper = lead(jnp.arange(k)[:, None] < jnp.arange(k)[None, :], pairs.ndim)  # a < b
    newest = jnp.min(jnp.where(upper, pairs, jnp.inf), axis=-2)  # min over a < b, per b
    return lax.cummin(newest, axis=newest.ndim - 1)


def _align(alpha, x, selected, context, members):
    """One rank for all row arrays; `alpha`, `selected` and `members` broadcast to the common
    batch shape `(*batch, rows)`, `x` and `context` only given the rank (size-1 axes)."""
    context = jnp.asarray(context)
    ndim = max(alpha.ndim, x.ndim, selected.ndim, context.ndim + 1, members.ndim)
    alpha, x, selected, members = (lead(a, ndim) for a in (alpha, x, selected, members))
    batch = jnp.broadcast_shapes(
        alpha.shape[:-1], selected.shape[:-1], members.shape[:-1], x.shape[:-2] + alpha.shape[-2:-1]
    )
    return (
        jnp.broadcast_to(alpha, batch + alpha.shape[-1:]),
        x,
        jnp.broadcast_to(selected, batch + selected.shape[-1:]),
        lead(context, ndim - 1),
        jnp.broadcast_to(members, batch + members.shape[-1:]),
    )


def _member_distances(alpha, xh, selected, context, members):
    """`X_i² = ‖α_i x̂_i − s‖²` for the listed `members`, `r² = min_{j∉I} X_j²` and the left-out
    mask (Gram identity; one product with s per row); arguments from `_align`."""
    w = jnp.where(selected, alpha, 0)
    s = dot("...rt,...td->...rd", w, xh)
    ss = jnp.sum(s * s, axis=-1, keepdims=True)
    xs = dot("...rd,...td->...rt", s, xh)
    gx = jnp.sum(xh * xh, axis=-1)[..., None, :]
    x2 = jnp.maximum(alpha * alpha * gx - 2 * alpha * xs + ss, 0)
    out = jnp.broadcast_to(visible_mask(context, alpha.shape[-1]), selected.shape) & ~selected
    r2 = jnp.min(jnp.where(out, x2, jnp.inf), axis=-1)
    x2_m = jnp.take_along_axis(x2, members, axis=-1)
    return x2_m, r2, out


def distinguished(
    alpha: Float[Array, "*#batch rows tokens"],
    x: Float[Array, "*#batch tokens dim"],
    selected: Bool[Array, "*#batch rows tokens"],
    context: Int[Array, "*#batch rows"],
    members: Int[Array, "*#batch rows k"],
    *,
    sphere_radius: float = 1.0,
) -> tuple[Bool[Array, "*#batch rows k"], Bool[Array, "*#batch rows"]]:
    """Which selected tokens are geometrically distinguishable (Theorem 2's criterion).

    Token i of the selected set I is distinguished when `‖α_i x̂_i − s‖ < r`, with
    `s = Σ_{j∈I} α_j x̂_j`, `r = min_{j∉I} ‖α_j x̂_j − s‖` and `x̂` on the sphere of radius M.
    [`separability`][]'s ratio `N_s/N` is the mean of these flags over I.

    **Arguments:**

    - `alpha`, `x`, `selected`, `context`: as in [`separability`][] (any set, not only top-N).
    - `members`: per row, the indices of exactly the selected tokens, `(*batch, rows, k)` with
      `k = |I|` (rows with fewer visible tokens than k list invisible ones last).
    - `sphere_radius`: M.

    **Returns:** `(flags, valid)`: per listed member whether it is distinguished, and per row
    whether some visible token is left out (elsewhere `r = ∞` and the flags are vacuous).
    """
    alpha, x, selected, context, members = _align(alpha, x, selected, context, members)
    x2_m, r2, out = _member_distances(
        alpha, sphere_normalize(x, sphere_radius), selected, context, members
    )
    n_sel = jnp.sum(selected, axis=-1)
    listed = lead(jnp.arange(members.shape[-1]), n_sel.ndim + 1) < n_sel[..., None]
    return listed & (x2_m < r2[..., None]), jnp.any(out, axis=-1)


def separability(
    alpha: Float[Array, "*#batch rows tokens"],
    x: Float[Array, "*#batch tokens dim"],
    selected: Bool[Array, "*#batch rows tokens"],
    context: Int[Array, "*#batch rows"],
    *,
    members: Int[Array, "*#batch rows k"],
    delta2: Float[Array, "*#batch rows"] | None = None,
    sphere_radius: float = 1.0,
    normalize: bool = True,
) -> Separability:
    """`N_s/N` and its Theorem 2 bounds for the selected set I.

    **Arguments:**

    - `alpha`, `selected`, `context`: as in [`selection_distance`][].
    - `x`: token vectors; put on the sphere of radius `sphere_radius` unless `normalize=False`
      (then they must lie on it, or inside it).
    - `members`: for every row, the indices of the selected tokens first (e.g. `order[..., :k]`
      from [`topn_order`][], k ≥ N); the per-token quantities `X_i`, `ξ_i` are only evaluated
      on them.
    - `delta2`: δ² per row, when already known (e.g. from [`prefix_min_distance2`][]); by
      default the minimum over the selected pairs.
    - `sphere_radius`: M.

    **Returns:** a [`Separability`][].
    """
    dtype = alpha.dtype
    big_m = jnp.asarray(sphere_radius, dtype)
    xh = sphere_normalize(x, sphere_radius) if normalize else x
    alpha, xh, selected, context, members = _align(alpha, xh, selected, context, members)
    k = members.shape[-1]
    n_sel = jnp.sum(selected, axis=-1, dtype=jnp.int32)
    is_member = lead(jnp.arange(k, dtype=jnp.int32), n_sel.ndim + 1) < n_sel[..., None]
    if delta2 is None:
        table = prefix_min_distance2(xh, members)
        delta2 = jnp.take_along_axis(table, jnp.clip(n_sel - 1, 0, k - 1)[..., None], axis=-1)[
            ..., 0
        ]
    delta2 = lead(delta2, n_sel.ndim)
    delta2 = jnp.where(jnp.isfinite(delta2), jnp.maximum(delta2, 0), 0)
    w = jnp.where(selected, alpha, 0)
    x2_m, r2, out = _member_distances(alpha, xh, selected, context, members)
    r = jnp.sqrt(r2)
    count = jnp.maximum(n_sel, 1).astype(dtype)
    # The Gram identity leaves an absolute error of a few ulps of (ᾱM)² in every X²; an r below
    # that is numerically zero (e.g. a left-out duplicate of a selected token with the same
    # weight), and the bound is then the trivial 0 rather than 1 − 0/r.
    mass_row = jnp.sum(jnp.where(selected, alpha, 0), axis=-1)
    r_zero = r2 <= 64 * jnp.finfo(dtype).eps * (mass_row * big_m) ** 2
    ratio = jnp.sum(is_member & (x2_m < r2[..., None]), axis=-1).astype(dtype) / count
    # ξ_i² for i ∈ I, using Σ_{j≠k∈I∖i} α_j α_k = (ᾱ − α_i)² − (Q − α_i²), Q = Σ_{j∈I} α_j².
    a_m = jnp.take_along_axis(alpha, members, axis=-1)
    mass = jnp.sum(w, axis=-1, keepdims=True)
    q = jnp.sum(w * w, axis=-1, keepdims=True)
    rem = mass - a_m
    cross = jnp.maximum(rem * rem - (q - a_m * a_m), 0)
    xi = safe_sqrt(big_m**2 * rem * rem - 0.5 * delta2[..., None] * cross)
    xi_sum = jnp.sum(jnp.where(is_member, xi, 0), axis=-1)
    finite = jnp.isfinite(r)
    r_pos = jnp.where(finite & (r > 0), r, 1)
    lower = jnp.where(finite, jnp.where(r_zero, 0, 1 - xi_sum / (count * r_pos)), 1)
    lower = jnp.clip(lower, 0, 1).astype(dtype)
    excess = jnp.where(
        finite[..., None], jnp.maximum(xi - jnp.where(finite, r, 0)[..., None], 0), 0
    )
    upper = (
        jnp.sum(jnp.where(is_member, jnp.exp(-(excess**2) / (2 * big_m**2)), 0), axis=-1) / count
    )
    return Separability(
        ratio=ratio,
        lower=lower,
        upper=upper,
        delta=safe_sqrt(delta2),
        radius=r,
        valid=jnp.any(out, axis=-1),
    )


def separability_curve(
    alpha: Float[Array, "*#batch rows tokens"],
    x: Float[Array, "*#batch tokens dim"],
    order: Int[Array, "*#batch rows k"],
    ranks: Int[Array, "*#batch rows tokens"],
    context: Int[Array, "*#batch rows"],
    ns: tuple[int, ...],
    *,
    sphere_radius: float = 1.0,
) -> Separability:
    """[`separability`][] of the top-N sets for every N in `ns` (static), with a trailing axis
    over `ns`. δ of all of them comes from one [`prefix_min_distance2`][] table.

    **Arguments:** `order` (at least the first `min(max(ns), tokens)` entries) and `ranks` from
    [`topn_order`][]; the rest as in [`separability`][].
    """
    ns = tuple(int(n) for n in ns)
    xh = sphere_normalize(x, sphere_radius)
    members = order[..., : max(ns)]
    table = prefix_min_distance2(xh, members)
    n_arr = jnp.asarray(ns, jnp.int32)

    def one(n):
        count = jnp.minimum(n, jnp.asarray(context, jnp.int32))
        count = jnp.broadcast_to(count, table.shape[:-1])
        d2 = jnp.take_along_axis(
            table, jnp.clip(count - 1, 0, table.shape[-1] - 1)[..., None], axis=-1
        )[..., 0]
        return separability(
            alpha,
            xh,
            ranks < n,
            context,
            members=members,
            delta2=d2,
            sphere_radius=sphere_radius,
            normalize=False,
        )

    out = lax.map(one, n_arr)
    return jax.tree_util.tree_map(lambda a: jnp.moveaxis(a, 0, -1), out)
