"""The mathematics of the bounds (docs/gpt2.md, "The bounds"): property tests over ≥ 10⁴ random
cases each,
brute-force references, closed forms against autodiff and exact enumeration.

Each hypothesis example draws a seed and a regime (scale of the logits, ties, duplicated
tokens, N, per-row contexts) and checks a batch of `HEADS × ROWS` attention rows at once with
jitted, fixed-shape functions; `EXAMPLES × HEADS × ROWS ≥ 10⁴`. Float64 throughout, so the
rigorous bounds are checked with a relative slack of 1e-9.
"""

from __future__ import annotations

import functools
import itertools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import headflow.validation.gpt2 as g

pytestmark = pytest.mark.usefixtures("fast_compile")  # compile-bound: XLA at -O0

HEADS, ROWS, TOKENS, DIM = 8, 16, 24, 5
EXAMPLES = 80  # 80 × 8 × 16 = 10 240 rows per property
assert EXAMPLES * HEADS * ROWS >= 10_000
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def _attention(rng, *, scale, ties, context, tokens=TOKENS, heads=HEADS, rows=ROWS):
    logits = scale * rng.normal(size=(heads, rows, tokens))
    if ties:
        logits = np.round(logits)
    visible = np.arange(tokens) < context[:, None]
    z = np.where(visible, logits, -np.inf)
    a = np.exp(z - z.max(-1, keepdims=True))
    return a / a.sum(-1, keepdims=True), logits


def _vectors(rng, *, duplicates, tokens=TOKENS, heads=HEADS, dim=DIM):
    x = rng.normal(size=(heads, tokens, dim)) * rng.lognormal(0, 0.5, size=(heads, tokens, 1))
    if duplicates:
        src = rng.integers(0, tokens, size=tokens // 3)
        dst = rng.integers(0, tokens, size=tokens // 3)
        x[:, dst] = x[:, src]
    return x


def _case(seed, scale, ties, duplicates, full):
    rng = np.random.default_rng(seed)
    context = np.full(ROWS, TOKENS) if full else rng.integers(1, TOKENS + 1, size=ROWS)
    alpha, logits = _attention(rng, scale=scale, ties=ties, context=context)
    x = _vectors(rng, duplicates=duplicates)
    return jnp.asarray(alpha), jnp.asarray(x), jnp.asarray(context, jnp.int32), logits


regimes = dict(seed=st.integers(0, 2 ** 32 - 1),
               scale=st.sampled_from([0.0, 0.1, 1.0, 3.0, 10.0, 40.0]),
               ties=st.booleans(), duplicates=st.booleans(), full=st.booleans())


@jax.jit
def _theorem1(alpha, x, context, n):
    order, ranks = g.topn_order(alpha, context)
    selected = ranks < n
    d = g.selection_distance(alpha, x, selected, context)
    exact = g.fixed_set_bound(alpha, x, selected, context, order, exact=True)
    fast = g.fixed_set_bound(alpha, x, selected, context, order, exact=False)
    d_norm = g.selection_distance(alpha, x, selected, context, reading="norm")
    norm = g.fixed_set_bound(alpha, x, selected, context, order, exact=True, reading="norm")
    out = jnp.broadcast_to(g.visible_mask(context, alpha.shape[-1]), selected.shape) & ~selected
    rest = jnp.sum(jnp.where(out, alpha, 0), axis=-1)
    x_out = jnp.max(jnp.where(out, jnp.linalg.norm(x, axis=-1)[..., None, :], 0), axis=-1)
    return d, exact, fast, d_norm, norm, rest * (exact.d1 + x_out)


@PROPERTY
@given(n=st.integers(1, TOKENS), **regimes)
def test_theorem1_fixed_set_bound(n, seed, scale, ties, duplicates, full):
    alpha, x, context, _ = _case(seed, scale, ties, duplicates, full)
    d, exact, fast, d_norm, norm, slack = _theorem1(alpha, x, context, n)
    d, b, b2 = np.asarray(d), np.asarray(exact.bound), np.asarray(exact.bound_max)
    assert np.all(d <= b * (1 + 1e-9) + 1e-12)
    # the sum reading's bound exceeds d̃ by at most (1 − ᾱ)(d_1 + max_{i∉I} ‖x_i‖)
    assert np.all(b - d <= np.asarray(slack) * (1 + 1e-9) + 1e-12)
    # the norm reading has its own bound, and its weaker form
    d_norm, bn, bn2 = np.asarray(d_norm), np.asarray(norm.bound), np.asarray(norm.bound_max)
    assert np.all(d_norm <= bn * (1 + 1e-9) + 1e-12) and np.all(bn <= bn2 * (1 + 1e-9) + 1e-12)
    assert np.all(b <= b2 * (1 + 1e-9) + 1e-12)
    # the fast d_1 is an upper bound, and exact where it says so
    assert np.all(np.asarray(fast.d1) >= np.asarray(exact.d1) * (1 - 1e-9) - 1e-12)
    flagged = np.asarray(fast.d1_exact)
    assert np.allclose(
        np.asarray(fast.d1)[flagged], np.asarray(exact.d1)[flagged], rtol=1e-9, atol=1e-12
    )
    assert np.all(d <= np.asarray(fast.bound) * (1 + 1e-9) + 1e-12)
    # nothing left out (N ≥ L_t): d̃ = 0 and the bound is 0
    done = np.asarray(context) <= n
    assert np.all(d[:, done] == 0) and np.allclose(b[:, done], 0, atol=1e-12)


@PROPERTY
@given(**regimes)
def test_distance_vanishes_at_n_equals_l(seed, scale, ties, duplicates, full):
    """With every token selected the sum reading is 0, the norm reading ‖s‖ = ‖Σ α x‖ (only
    the sum reading collapses as N → L), and each bound equals its distance."""
    alpha, x, context, _ = _case(seed, scale, ties, duplicates, full)
    d, d_norm, b, b_norm, u = _everything_selected(alpha, x, context)
    assert np.all(np.asarray(d) == 0) and np.allclose(b, 0, atol=1e-12)
    assert np.allclose(d_norm, u, rtol=1e-12, atol=1e-12)
    assert np.allclose(b_norm, u, rtol=1e-12, atol=1e-12)


@jax.jit
def _everything_selected(alpha, x, context):
    order, ranks = g.topn_order(alpha, context)
    selected = ranks < TOKENS
    u = jnp.linalg.norm(jnp.einsum("hrt,htd->hrd", alpha, x), axis=-1)
    return (
        g.selection_distance(alpha, x, selected, context),
        g.selection_distance(alpha, x, selected, context, reading="norm"),
        g.fixed_set_bound(alpha, x, selected, context, order).bound,
        g.fixed_set_bound(alpha, x, selected, context, order, reading="norm").bound,
        u,
    )


@jax.jit
def _readings(alpha, x, context):
    order, ranks = g.topn_order(alpha, context)
    out = []
    for n in (1, 3):
        selected = ranks < n
        out.append(
            [
                g.selection_distance(alpha, x, selected, context)[0],
                g.selection_distance(alpha, x, selected, context, reading="norm")[0],
                g.fixed_set_bound(alpha, x, selected, context, order).bound[0],
                g.fixed_set_bound(alpha, x, selected, context, order, reading="norm").bound[0],
            ]
        )
    return jnp.asarray(out)


def test_theorem1_readings():
    """Identical token vectors v (‖v‖ = 5) under uniform weights over L = 7 tokens. Sum
    reading: its bound is attained, `(L − N)(N − 1)/L ‖v‖` (0 for N = 1, 40/7 for N = 3).
    Norm reading: d̃ = `|1 − 2N/L| ‖v‖`, which the sum reading's formula (0 at N = 1) does not
    bound; its own bound `(1 − ᾱ) d_1 + |1 − 2ᾱ| ‖s‖/ᾱ` is attained."""
    length, norm_v = 7, 5.0
    alpha = jnp.full((1, length), 1 / length)
    x = jnp.asarray(np.tile([3.0, -4.0], (length, 1)))
    (d1, dn1, b1, bn1), (d3, dn3, b3, bn3) = np.asarray(
        _readings(alpha, x, jnp.asarray([length], jnp.int32))
    )
    # d̃ comes from the Gram identity, which keeps √ε of the scale ‖v‖ where its terms cancel
    assert d1 == pytest.approx(0, abs=1e-6) and b1 == pytest.approx(0, abs=1e-12)
    assert d3 == pytest.approx(4 * 2 / 7 * norm_v, rel=1e-9) and b3 == pytest.approx(
        40 / 7, rel=1e-12
    )
    assert dn1 == pytest.approx(5 / 7 * norm_v, rel=1e-12) and bn1 == pytest.approx(dn1, rel=1e-12)
    assert dn3 == pytest.approx(1 / 7 * norm_v, rel=1e-12) and bn3 == pytest.approx(dn3, rel=1e-12)
    assert dn1 > b1 + 1  # the sum reading's formula is no bound for the norm reading


@jax.jit
def _corollary1(q, k, context, temperature):
    logits = jnp.einsum("hrd,htd->hrt", q, k)
    mask = g.visible_mask(context, k.shape[-2])
    alpha = g.Softmax(temperature)(logits, mask)
    lower, upper = g.softmax_weight_bounds(q, k, context, temperature)
    return alpha, lower, upper, mask


@PROPERTY
@given(
    seed=st.integers(0, 2**32 - 1),
    norm=st.sampled_from([0.01, 0.3, 1.0, 3.0]),
    temperature=st.sampled_from([0.5, 1.0, 8.0, 30.0]),
)
def test_corollary1_weight_bounds(seed, norm, temperature):
    rng = np.random.default_rng(seed)
    q = jnp.asarray(norm * rng.normal(size=(HEADS, ROWS, DIM)))
    k = jnp.asarray(norm * rng.normal(size=(HEADS, TOKENS, DIM)))
    context = jnp.asarray(rng.integers(1, TOKENS + 1, size=ROWS), jnp.int32)
    alpha, lower, upper, mask = (np.asarray(a) for a in _corollary1(q, k, context, temperature))
    mask = np.broadcast_to(mask, alpha.shape)
    assert np.all(alpha[mask] >= np.broadcast_to(lower[..., None], alpha.shape)[mask] * (1 - 1e-9))
    assert np.all(alpha[mask] <= np.broadcast_to(upper[..., None], alpha.shape)[mask] * (1 + 1e-9))
    assert (
        int(
            np.sum(
                g.weight_bound_violations(jnp.asarray(alpha), q, k, context, temperature, rtol=1e-9)
            )
        )
        == 0
    )


def test_lemma1_constants():
    """C_1/L ≤ α_j ≤ C_2/L for logits in [−a, a], with C from min F / max F."""
    rng = np.random.default_rng(0)
    for norm in (g.Softmax(0.7), g.Softmax(5.0), g.ScalableSoftmax(0.4)):
        a = 2.0
        logits = jnp.asarray(rng.uniform(-a, a, size=(200, 17)))
        alpha = np.asarray(norm(logits))
        c1, c2 = (float(c) for c in norm.lemma1_constants(a, 17))
        assert np.all(alpha >= c1 / 17 * (1 - 1e-12)) and np.all(alpha <= c2 / 17 * (1 + 1e-12))


@jax.jit
def _theorem2(alpha, x, context, n):
    order, ranks = g.topn_order(alpha, context)
    sep = g.separability(alpha, x, ranks < n, context, members=order)
    # random sets too: the bound holds for any fixed set
    rand_ranks = g.random_ranks(jax.random.key(n), context, alpha.shape[-1])
    rand_order = jnp.argsort(rand_ranks, axis=-1).astype(jnp.int32)
    sep_r = g.separability(alpha, x, rand_ranks < n, context, members=rand_order)
    return sep, sep_r


@PROPERTY
@given(n=st.integers(1, TOKENS), **regimes)
def test_theorem2_lower_bound(n, seed, scale, ties, duplicates, full):
    """Pointwise, hence in expectation, for x uniform on spheres (and any other x, normalized)."""
    alpha, x, context, _ = _case(seed, scale, ties, duplicates, full)
    x = jnp.asarray(np.random.default_rng(seed + 1).normal(size=x.shape)) if seed % 2 else x
    for sep in _theorem2(alpha, x, context, n):
        ratio, lower = np.asarray(sep.ratio), np.asarray(sep.lower)
        assert np.all(ratio >= lower - 1e-9)
        assert np.all((lower >= 0) & (lower <= 1) & (ratio >= 0) & (ratio <= 1))


def test_theorem2_in_expectation_over_random_spheres():
    rng = np.random.default_rng(7)
    ratios, lowers = [], []
    for _ in range(20):
        x = rng.normal(size=(HEADS, TOKENS, DIM))
        x /= np.linalg.norm(x, axis=-1, keepdims=True)
        context = np.full(ROWS, TOKENS)
        alpha, _ = _attention(rng, scale=3.0, ties=False, context=context)
        sep, _ = _theorem2(jnp.asarray(alpha), jnp.asarray(x), jnp.asarray(context, jnp.int32), 4)
        ratios.append(np.asarray(sep.ratio))
        lowers.append(np.asarray(sep.lower))
    assert np.mean(ratios) >= np.mean(lowers)


def _xi_brute(al, xs, sel, delta, radius=1.0):
    """ξ_i from its definition (double sum over j ≠ k in I∖i)."""
    out = []
    for i in sel:
        rest = [j for j in sel if j != i]
        cross = sum(al[j] * al[k] for j in rest for k in rest if j != k)
        out.append(
            math.sqrt(
                max(radius**2 * (sum(al[j] for j in sel) - al[i]) ** 2 - delta**2 / 2 * cross, 0)
            )
        )
    return np.array(out)


@jax.jit
def _brute_inputs(alpha, x, context, n):
    order, ranks = g.topn_order(alpha, context)
    sel = ranks < n
    return (
        g.selection_distance(alpha, x, sel, context),
        g.selection_distance(alpha, x, sel, context, reading="norm"),
        g.fixed_set_bound(alpha, x, sel, context, order).d1,
        g.separability(alpha, x, sel, context, members=order),
    )


@pytest.mark.slow
def test_against_brute_force():
    """d̃, d_1, N_s/N, δ and ξ (through the lower bound) against direct per-row loops."""
    rng = np.random.default_rng(3)
    heads, rows, tokens = 3, 9, 11
    for trial in range(4):
        context = rng.integers(1, tokens + 1, size=rows)
        alpha, _ = _attention(
            rng,
            scale=[0.5, 2.0, 10.0][trial % 3],
            ties=trial % 2 == 1,
            context=context,
            tokens=tokens,
            heads=heads,
            rows=rows,
        )
        x = _vectors(rng, duplicates=trial >= 2, tokens=tokens, heads=heads, dim=4)
        ja, jx, jc = jnp.asarray(alpha), jnp.asarray(x), jnp.asarray(context, jnp.int32)
        for n in (1, 2, 4, tokens):
            d, dn, d1, sep = jax.tree_util.tree_map(np.asarray, _brute_inputs(ja, jx, jc, n))
            for h, r in itertools.product(range(heads), range(rows)):
                L = context[r]
                al, xs = alpha[h, r, :L], x[h, :L]
                idx = np.argsort(-al, kind="stable")
                chosen, rest = idx[:n], idx[n:]
                s = al[chosen] @ xs[chosen]
                assert d[h, r] == pytest.approx(
                    sum(np.linalg.norm(al[i] * xs[i] - s) for i in rest), rel=1e-10, abs=1e-12
                )
                assert dn[h, r] == pytest.approx(
                    np.linalg.norm(al[rest] @ xs[rest] - s), rel=1e-10, abs=1e-12
                )
                assert d1[h, r] == pytest.approx(
                    max((np.linalg.norm(xs[i] - xs[j]) for i in rest for j in chosen), default=0.0),
                    rel=1e-10,
                    abs=1e-12,
                )
                xh = xs / np.linalg.norm(xs, axis=1, keepdims=True)
                sh = al[chosen] @ xh[chosen]
                dist = np.linalg.norm(sh[None] - al[:, None] * xh, axis=1)
                radius = min((dist[i] for i in rest), default=np.inf)
                ratio = np.mean([dist[i] < radius for i in chosen])
                assert float(sep.ratio[h, r]) == pytest.approx(ratio)
                delta = min(
                    (np.linalg.norm(xh[i] - xh[j]) for i in chosen for j in chosen if i != j),
                    default=0.0,
                )
                assert float(sep.delta[h, r]) == pytest.approx(delta, abs=1e-7)
                if len(rest) and radius > 0:
                    xi = _xi_brute(al, xh, list(chosen), delta)
                    assert np.all(xi >= dist[chosen] - 1e-9)  # X_i ≤ ξ_i
                    lower = min(max(1 - xi.sum() / (len(chosen) * radius), 0), 1)
                    assert float(sep.lower[h, r]) == pytest.approx(lower, abs=1e-7)


@PROPERTY
@given(
    seed=st.integers(0, 2**32 - 1),
    scale=st.sampled_from([0.0, 0.3, 2.0, 20.0, 200.0]),
    temperature=st.sampled_from([0.01, 0.1, 1.0, 8.0]),
    ties=st.booleans(),
    full=st.booleans(),
)
def test_jacobian_spectral_norm(seed, scale, temperature, ties, full):
    rng = np.random.default_rng(seed)
    context = np.full(ROWS, TOKENS) if full else rng.integers(1, TOKENS + 1, size=ROWS)
    alpha, _ = _attention(rng, scale=scale, ties=ties, context=context)
    norm, jac, diag = (np.asarray(a) for a in _jacobians(jnp.asarray(alpha), temperature))
    exact = np.linalg.eigvalsh(jac)[..., -1]
    assert np.allclose(norm, exact, rtol=1e-9, atol=1e-12 / temperature)
    assert np.all(norm <= (1 + 1e-12) / (2 * temperature))
    assert np.all(diag <= (1 + 1e-12) / (4 * temperature))


@jax.jit
def _jacobians(alpha, temperature):
    return (
        g.softmax_jacobian_norm(alpha, temperature),
        g.softmax_jacobian(alpha, temperature),
        g.softmax_jacobian_diag_max(alpha, temperature),
    )


def test_spectral_bound_is_attained():
    alpha = jnp.asarray([[0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [1.0, 0, 0, 0]])
    assert np.allclose(g.softmax_jacobian_norm(alpha, 2.0), [0.25, 0.125, 0.0])


@eqx.filter_jit
def _normalizer_case(normalizer, logits, mask):
    return (
        normalizer.jacobian(logits, mask),
        g.AbstractNormalizer.jacobian(normalizer, logits, mask),
        normalizer.jacobian_norm(logits, mask, iterations=200),
        normalizer.jacobian_diagonal(logits, mask),
        normalizer(logits, mask),
    )


@pytest.mark.parametrize(
    "normalizer",
    [
        g.Softmax(0.3),
        g.Softmax(8.0),
        g.ScalableSoftmax(0.5),
        g.Sparsemax(),
        g.SelfAdjustingSoftmax(),
        g.MinMaxSelfAdjustingSoftmax(),
    ],
    ids=lambda n: type(n).__name__ + str(getattr(n, "temperature", "")),
)
def test_jacobian_equals_autodiff(normalizer):
    """Closed-form Jacobians against autodiff; the Jacobian norm (closed form or power iteration)
    and diagonal against the dense matrix; the rigorous Jacobian bounds; the weights' sign and
    sum as the class declares them."""
    rng = np.random.default_rng(11)
    logits = jnp.asarray(rng.normal(size=(400, 9)) * 2)
    mask = jnp.asarray(np.arange(9) < rng.integers(1, 10, size=(400, 1)))
    jac, auto, norm, diag, weights = (
        np.asarray(a) for a in _normalizer_case(normalizer, logits, mask)
    )
    assert np.allclose(jac, auto, atol=1e-10)
    svd = np.linalg.svd(jac, compute_uv=False)[..., 0]
    assert np.allclose(norm, svd, rtol=1e-6, atol=1e-9)
    assert np.allclose(diag, np.diagonal(jac, axis1=-2, axis2=-1), atol=1e-12)
    bounds = normalizer.jacobian_bounds(jnp.sum(mask, axis=-1).astype(logits.dtype))
    if bounds is not None:
        assert np.all(svd <= np.asarray(bounds[0]) * (1 + 1e-12) + 1e-15)
        assert np.all(
            np.diagonal(jac, axis1=-2, axis2=-1).max(-1)
            <= np.asarray(bounds[1]) * (1 + 1e-12) + 1e-15
        )
    assert np.all(weights[~np.asarray(mask)] == 0)
    if normalizer.normalized:
        assert np.allclose(weights.sum(-1), 1)
    if normalizer.nonnegative:
        assert np.all(weights >= 0)
    else:
        assert np.any(weights < 0)


def test_normalizers_by_name():
    """SSMax with `ssmax_length = n₀` equals softmax on rows of n₀ visible tokens and is sharper
    on longer rows; the names round-trip."""
    rng = np.random.default_rng(3)
    logits = jnp.asarray(rng.normal(size=(50, 40)))
    for n0 in (8, 32):
        mask = jnp.arange(40) < n0
        ss = g.normalizer_from_name("ssmax", ssmax_length=n0)(logits, mask)
        assert np.allclose(ss, g.Softmax(1.0)(logits, mask), atol=1e-12)
    long = jnp.ones(40, bool)
    sharp = g.normalizer_from_name("ssmax", ssmax_length=8)(logits, long)
    assert np.all(np.max(sharp, -1) > np.max(g.Softmax(1.0)(logits, long), -1))
    assert [g.normalizer_from_name(n).name for n in g.NORMALIZER_NAMES] == list(g.NORMALIZER_NAMES)
    with pytest.raises(ValueError):
        g.normalizer_from_name("tanhmax")


def test_sparsemax_is_the_simplex_projection():
    rng = np.random.default_rng(5)
    z = rng.normal(size=(300, 7)) * 2
    p = np.asarray(g.Sparsemax()(jnp.asarray(z)))
    # KKT: p = max(z − τ, 0) with one τ per row and Σ p = 1
    for zi, pi in zip(z, p):
        support = pi > 0
        tau = np.mean(zi[support] - pi[support])
        assert np.allclose(pi, np.maximum(zi - tau, 0), atol=1e-12) and pi.sum() == pytest.approx(1)


@given(seed=st.integers(0, 2**32 - 1), temperature=st.sampled_from([0.05, 0.5, 8.0]))
@settings(max_examples=25, deadline=None, derandomize=True)
def test_finite_difference_converges_to_jacobian(seed, temperature):
    """g(T, ε) → ‖J u‖ as ε → 0, with an O(ε) error; and g ≤ √2/ε for every ε."""
    rng = np.random.default_rng(seed)
    logits = jnp.asarray(rng.normal(size=(64, TOKENS)) * 0.5)
    mask = jnp.asarray(np.arange(TOKENS) < rng.integers(2, TOKENS + 1, size=(64, 1)))
    ju, fds, big, norm = (
        np.asarray(a) for a in _fd_case(logits, mask, jax.random.key(seed % 1000), temperature)
    )
    errors = np.max(np.abs(fds - ju), axis=-1) * temperature  # in units of the Jacobian's scale 1/T
    assert errors[-1] < 1e-3
    for coarse, fine in zip(errors, errors[1:]):  # first order in ε, down to round-off
        assert fine < 0.2 * coarse or fine < 1e-9
    assert np.all(big <= math.sqrt(2) / 10 + 1e-12)
    assert np.all(ju <= norm * (1 + 1e-9) + 1e-15)


@jax.jit
def _fd_case(logits, mask, key, temperature):
    u = g.random_unit_directions(key, logits.shape, mask, dtype=jnp.float64)
    alpha = g.Softmax(temperature)(logits, mask)
    ju = jnp.linalg.norm(
        jnp.einsum("rij,rj->ri", g.softmax_jacobian(alpha, temperature), u), axis=-1
    )
    fds = jnp.stack(
        [
            g.fd_sensitivity(logits, u, temperature, eps * temperature, mask)
            for eps in (1e-2, 1e-3, 1e-4)
        ]
    )
    return (
        ju,
        fds,
        g.fd_sensitivity(logits, u, temperature, 10.0, mask),
        g.softmax_jacobian_norm(alpha, temperature),
    )


def _exact_random_expectation(al, xs, n):
    """E[d̃] over all N-subsets, by enumeration."""
    L = len(al)
    total = 0.0
    subsets = list(itertools.combinations(range(L), n))
    for chosen in subsets:
        s = al[list(chosen)] @ xs[list(chosen)]
        total += sum(np.linalg.norm(al[i] * xs[i] - s) for i in range(L) if i not in chosen)
    return total / len(subsets)


@pytest.mark.slow
@pytest.mark.usefixtures("optimized")  # compute-bound: full optimization
def test_random_set_formula_vs_exact_and_monte_carlo():
    """formula ≤ exact expectation (Jensen gap ≥ 0), and Monte Carlo → exact within its error."""
    rng = np.random.default_rng(2)
    rows, tokens = 6, 8
    context = np.array([2, 3, 5, 8, 8, 7])
    alpha, _ = _attention(
        rng, scale=1.5, ties=False, context=context, tokens=tokens, heads=2, rows=rows
    )
    x = _vectors(rng, duplicates=False, tokens=tokens, heads=2, dim=3)
    ja, jx, jc = jnp.asarray(alpha), jnp.asarray(x), jnp.asarray(context, jnp.int32)
    for n in (1, 2, 4):
        formula = np.asarray(g.random_set_distance(ja, jx, jc, n))
        vector = np.asarray(g.random_set_distances(ja, jx, jc, jnp.asarray([n])))[..., 0]
        assert np.allclose(formula, vector)
        mc, sem = (
            np.asarray(a)
            for a in g.random_set_distance_mc(jax.random.key(n), ja, jx, jc, n, samples=4000)
        )
        for h, r in itertools.product(range(2), range(rows)):
            L = context[r]
            if L <= n:
                assert formula[h, r] == 0 and mc[h, r] == 0
                continue
            exact = _exact_random_expectation(alpha[h, r, :L], x[h, :L], n)
            assert formula[h, r] <= exact * (1 + 1e-12)
            assert abs(mc[h, r] - exact) <= 5 * sem[h, r] + 1e-12


@PROPERTY
@given(
    seed=st.integers(0, 2**32 - 1), n=st.integers(1, TOKENS - 1), scale=st.sampled_from([0.3, 3.0])
)
@pytest.mark.usefixtures("optimized")  # compute-bound: full optimization
def test_random_formula_below_monte_carlo(seed, n, scale):
    """Jensen: the closed form never exceeds the Monte Carlo mean beyond its error bar."""
    rng = np.random.default_rng(seed)
    context = np.full(ROWS, TOKENS)
    alpha, _ = _attention(rng, scale=scale, ties=False, context=context)
    x = jnp.asarray(_vectors(rng, duplicates=False))
    alpha, context = jnp.asarray(alpha), jnp.asarray(context, jnp.int32)
    formula, mc, sem = _jensen(alpha, x, context, n, jax.random.key(seed % 2**31))
    assert np.all(np.asarray(formula) <= np.asarray(mc) + 5 * np.asarray(sem) + 1e-12)


@functools.partial(jax.jit, static_argnames=())
def _jensen(alpha, x, context, n, key):
    mc, sem = g.random_set_distance_mc(key, alpha, x, context, n, samples=1024)
    return g.random_set_distance(alpha, x, context, n), mc, sem


@pytest.mark.parametrize("signed", [False, True], ids=["weights", "signed"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_host_sort_matches_device_sort(dtype, signed):
    rng = np.random.default_rng(1)
    context = rng.integers(1, 40, size=30)
    alpha, logits = _attention(
        rng, scale=2.0, ties=True, context=context, tokens=40, heads=3, rows=30
    )
    if signed:  # SA-softmax weights take the sign of the logits
        alpha = np.where(np.arange(40) < context[:, None], alpha * np.round(logits), 0)
    alpha = alpha.astype(dtype)
    alpha[0, 0, 1] = -0.0  # negative zero must sort like zero
    order, ranks = g.topn_order(jnp.asarray(alpha), jnp.asarray(context, jnp.int32))
    horder, hranks = g.topn_order_host(alpha, context)
    assert np.array_equal(np.asarray(order), horder) and np.array_equal(np.asarray(ranks), hranks)


def test_entropy_and_prefix_tables():
    rng = np.random.default_rng(4)
    context = rng.integers(1, TOKENS + 1, size=ROWS)
    alpha, _ = _attention(rng, scale=1.0, ties=False, context=context)
    ent = np.asarray(g.attention_entropy(jnp.asarray(alpha)))
    assert np.all(ent >= -1e-12) and np.all(ent <= np.log(context) + 1e-9)
    x = jnp.asarray(_vectors(rng, duplicates=True))
    order, _ = g.topn_order(jnp.asarray(alpha), jnp.asarray(context, jnp.int32))
    table = np.asarray(g.prefix_min_distance2(x, order[..., :6]))
    xs, o = np.asarray(x), np.asarray(order)
    for h, r, m in itertools.product(range(2), range(3), range(1, 6)):
        pts = xs[h, o[h, r, : m + 1]]
        want = min(np.sum((pts[a] - pts[b]) ** 2) for a in range(m + 1) for b in range(a))
        assert table[h, r, m] == pytest.approx(want, abs=1e-9)


@jax.jit
def _flags_and_ratios(alpha, x, context):
    order, ranks = g.topn_order(alpha, context)
    own = [
        (
            g.distinguished(alpha, x, ranks < n, context, order[..., :n]),
            g.separability(alpha, x, ranks < n, context, members=order),
        )
        for n in (1, 3, 6)
    ]
    shared_order, shared_ranks = g.topn_order(alpha.mean(0), context)
    shared = (
        g.distinguished(alpha, x, shared_ranks < 4, context, shared_order[..., :4]),
        g.separability(
            alpha, x, shared_ranks < 4, context, members=jnp.broadcast_to(shared_order, alpha.shape)
        ),
    )
    return own, shared


def test_distinguished_is_separability():
    """The per-token flags of Theorem 2's criterion average to N_s/N, for top-N sets and for
    a set shared by all heads (what the multi-head coverage uses)."""
    rng = np.random.default_rng(9)
    context = rng.integers(2, TOKENS + 1, size=ROWS)
    alpha, _ = _attention(rng, scale=2.0, ties=False, context=context)
    own, shared = _flags_and_ratios(
        jnp.asarray(alpha),
        jnp.asarray(_vectors(rng, duplicates=True)),
        jnp.asarray(context, jnp.int32),
    )
    for n, ((flags, valid), sep) in zip((1, 3, 6, 4), [*own, shared]):
        assert np.allclose(np.asarray(flags).sum(-1) / np.minimum(n, context), sep.ratio)
        assert np.array_equal(valid, sep.valid)


def test_coverage_formulas():
    """The exact mean over h-subsets of heads against enumeration; independent heads with their
    own p against enumeration; and, for tokens whose distinguishing heads are independent with
    probability p, the measured coverage against `1 − (1 − p)^h` within Monte Carlo error."""
    from scipy.special import comb

    from headflow.validation.gpt2._summaries import (independent_heads_coverage,
                                                     subset_miss_probability)

    heads, rng = 6, np.random.default_rng(4)
    flags = rng.random((200, heads)) < rng.uniform(0.2, 0.9, size=heads)  # tokens × heads
    k = flags.sum(-1)
    p_heads = rng.uniform(0.1, 0.95, size=heads)
    for h in range(1, heads + 1):
        subsets = list(itertools.combinations(range(heads), h))
        brute = np.mean([flags[:, list(s)].any(-1).mean() for s in subsets])
        assert 1 - subset_miss_probability(k, heads, h).mean() == pytest.approx(brute, rel=1e-12)
        indep = np.mean([1 - np.prod(1 - p_heads[list(s)]) for s in subsets])
        assert independent_heads_coverage(p_heads, h) == pytest.approx(indep, rel=1e-12)
        assert len(subsets) == comb(heads, h)
    p, tokens = 0.8, 40_000
    k = rng.binomial(12, p, size=tokens)
    for h in (1, 2, 3, 6):
        measured = 1 - subset_miss_probability(k, 12, h).mean()
        sem = np.std(subset_miss_probability(k, 12, h)) / np.sqrt(tokens)
        assert abs(measured - (1 - (1 - p) ** h)) < 5 * sem + 1e-12
