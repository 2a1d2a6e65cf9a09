"""The mathematics of the bounds (spec §2–§5): property tests over ≥ 10⁴ random cases each,
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

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import validation.gpt2 as g

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
    return d, exact, fast


@PROPERTY
@given(n=st.integers(1, TOKENS), **regimes)
def test_theorem1_fixed_set_bound(n, seed, scale, ties, duplicates, full):
    alpha, x, context, _ = _case(seed, scale, ties, duplicates, full)
    d, exact, fast = _theorem1(alpha, x, context, n)
    d, b, b2 = np.asarray(d), np.asarray(exact.bound), np.asarray(exact.bound_max)
    assert np.all(d <= b * (1 + 1e-9) + 1e-12)
    assert np.all(b <= b2 * (1 + 1e-9) + 1e-12)
    # the fast d_1 is an upper bound, and exact where it says so
    assert np.all(np.asarray(fast.d1) >= np.asarray(exact.d1) * (1 - 1e-9) - 1e-12)
    flagged = np.asarray(fast.d1_exact)
    assert np.allclose(np.asarray(fast.d1)[flagged], np.asarray(exact.d1)[flagged], rtol=1e-9, atol=1e-12)
    assert np.all(d <= np.asarray(fast.bound) * (1 + 1e-9) + 1e-12)
    # nothing left out (N ≥ L_t): d̃ = 0 and the bound is 0
    done = np.asarray(context) <= n
    assert np.all(d[:, done] == 0) and np.allclose(b[:, done], 0, atol=1e-12)


@PROPERTY
@given(**regimes)
def test_distance_vanishes_at_n_equals_l(seed, scale, ties, duplicates, full):
    alpha, x, context, _ = _case(seed, scale, ties, duplicates, full)
    for reading in ("sum", "norm"):
        d = g.selection_distance(alpha, x, g.topn_mask(alpha, context, TOKENS), context,
                                 reading=reading)
        assert np.all(np.asarray(d) == 0)


@jax.jit
def _corollary1(q, k, context, temperature):
    logits = jnp.einsum("hrd,htd->hrt", q, k)
    mask = g.visible_mask(context, k.shape[-2])
    alpha = g.Softmax(temperature)(logits, mask)
    lower, upper = g.softmax_weight_bounds(q, k, context, temperature)
    return alpha, lower, upper, mask


@PROPERTY
@given(seed=st.integers(0, 2 ** 32 - 1), norm=st.sampled_from([0.01, 0.3, 1.0, 3.0]),
       temperature=st.sampled_from([0.5, 1.0, 8.0, 30.0]))
def test_corollary1_weight_bounds(seed, norm, temperature):
    rng = np.random.default_rng(seed)
    q = jnp.asarray(norm * rng.normal(size=(HEADS, ROWS, DIM)))
    k = jnp.asarray(norm * rng.normal(size=(HEADS, TOKENS, DIM)))
    context = jnp.asarray(rng.integers(1, TOKENS + 1, size=ROWS), jnp.int32)
    alpha, lower, upper, mask = (np.asarray(a) for a in _corollary1(q, k, context, temperature))
    mask = np.broadcast_to(mask, alpha.shape)
    assert np.all(alpha[mask] >= np.broadcast_to(lower[..., None], alpha.shape)[mask] * (1 - 1e-9))
    assert np.all(alpha[mask] <= np.broadcast_to(upper[..., None], alpha.shape)[mask] * (1 + 1e-9))
    assert int(np.sum(g.weight_bound_violations(jnp.asarray(alpha), q, k, context, temperature,
                                                rtol=1e-9))) == 0


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
        out.append(math.sqrt(max(radius ** 2 * (sum(al[j] for j in sel) - al[i]) ** 2
                                 - delta ** 2 / 2 * cross, 0)))
    return np.array(out)


@pytest.mark.slow
def test_against_brute_force():
    """d̃, d_1, N_s/N, δ and ξ (through the lower bound) against direct per-row loops."""
    rng = np.random.default_rng(3)
    heads, rows, tokens = 3, 9, 11
    for trial in range(4):
        context = rng.integers(1, tokens + 1, size=rows)
        alpha, _ = _attention(rng, scale=[0.5, 2.0, 10.0][trial % 3], ties=trial % 2 == 1,
                              context=context, tokens=tokens, heads=heads, rows=rows)
        x = _vectors(rng, duplicates=trial >= 2, tokens=tokens, heads=heads, dim=4)
        ja, jx, jc = jnp.asarray(alpha), jnp.asarray(x), jnp.asarray(context, jnp.int32)
        order, ranks = g.topn_order(ja, jc)
        for n in (1, 2, 4, tokens):
            sel = ranks < n
            d = np.asarray(g.selection_distance(ja, jx, sel, jc))
            dn = np.asarray(g.selection_distance(ja, jx, sel, jc, reading="norm"))
            d1 = np.asarray(g.fixed_set_bound(ja, jx, sel, jc, order).d1)
            sep = g.separability(ja, jx, sel, jc, members=order)
            for h, r in itertools.product(range(heads), range(rows)):
                L = context[r]
                al, xs = alpha[h, r, :L], x[h, :L]
                idx = np.argsort(-al, kind="stable")
                chosen, rest = idx[:n], idx[n:]
                s = al[chosen] @ xs[chosen]
                assert d[h, r] == pytest.approx(sum(np.linalg.norm(al[i] * xs[i] - s) for i in rest),
                                                rel=1e-10, abs=1e-12)
                assert dn[h, r] == pytest.approx(
                    np.linalg.norm(al[rest] @ xs[rest] - s) if len(rest) else 0.0, rel=1e-10, abs=1e-12)
                assert d1[h, r] == pytest.approx(max((np.linalg.norm(xs[i] - xs[j]) for i in rest
                                                      for j in chosen), default=0.0), rel=1e-10, abs=1e-12)
                xh = xs / np.linalg.norm(xs, axis=1, keepdims=True)
                sh = al[chosen] @ xh[chosen]
                dist = np.linalg.norm(sh[None] - al[:, None] * xh, axis=1)
                radius = min((dist[i] for i in rest), default=np.inf)
                ratio = np.mean([dist[i] < radius for i in chosen])
                assert float(sep.ratio[h, r]) == pytest.approx(ratio)
                delta = min((np.linalg.norm(xh[i] - xh[j]) for i in chosen for j in chosen if i != j),
                            default=0.0)
                assert float(sep.delta[h, r]) == pytest.approx(delta, abs=1e-7)
                if len(rest) and radius > 0:
                    xi = _xi_brute(al, xh, list(chosen), delta)
                    assert np.all(xi >= dist[chosen] - 1e-9)  # X_i ≤ ξ_i
                    lower = min(max(1 - xi.sum() / (len(chosen) * radius), 0), 1)
                    assert float(sep.lower[h, r]) == pytest.approx(lower, abs=1e-7)


@PROPERTY
@given(seed=st.integers(0, 2 ** 32 - 1), scale=st.sampled_from([0.0, 0.3, 2.0, 20.0, 200.0]),
       temperature=st.sampled_from([0.01, 0.1, 1.0, 8.0]), ties=st.booleans(), full=st.booleans())
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
    return (g.softmax_jacobian_norm(alpha, temperature), g.softmax_jacobian(alpha, temperature),
            g.softmax_jacobian_diag_max(alpha, temperature))


def test_spectral_bound_is_attained():
    alpha = jnp.asarray([[0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [1.0, 0, 0, 0]])
    assert np.allclose(g.softmax_jacobian_norm(alpha, 2.0), [0.25, 0.125, 0.0])


@pytest.mark.parametrize("normalizer", [g.Softmax(0.3), g.Softmax(8.0), g.ScalableSoftmax(0.5),
                                        g.Sparsemax(), g.SelfAdjustingSoftmax(),
                                        g.SelfAdjustingSoftmax(minmax=True)],
                         ids=lambda n: type(n).__name__ + str(getattr(n, "minmax", "")))
def test_jacobian_equals_autodiff(normalizer):
    rng = np.random.default_rng(11)
    logits = jnp.asarray(rng.normal(size=(400, 9)) * 2)
    mask = jnp.asarray(np.arange(9) < rng.integers(1, 10, size=(400, 1)))
    jac = np.asarray(normalizer.jacobian(logits, mask))
    auto = np.asarray(g.AbstractNormalizer.jacobian(normalizer, logits, mask))
    assert np.allclose(jac, auto, atol=1e-10)
    weights = np.asarray(normalizer(logits, mask))
    assert np.all(weights[~np.asarray(mask)] == 0)
    if not isinstance(normalizer, g.SelfAdjustingSoftmax):
        assert np.allclose(weights.sum(-1), 1) and np.all(weights >= 0)


def test_sparsemax_is_the_simplex_projection():
    rng = np.random.default_rng(5)
    z = rng.normal(size=(300, 7)) * 2
    p = np.asarray(g.Sparsemax()(jnp.asarray(z)))
    # KKT: p = max(z − τ, 0) with one τ per row and Σ p = 1
    for zi, pi in zip(z, p):
        support = pi > 0
        tau = np.mean(zi[support] - pi[support])
        assert np.allclose(pi, np.maximum(zi - tau, 0), atol=1e-12) and pi.sum() == pytest.approx(1)


@given(seed=st.integers(0, 2 ** 32 - 1), temperature=st.sampled_from([0.05, 0.5, 8.0]))
@settings(max_examples=25, deadline=None, derandomize=True)
def test_finite_difference_converges_to_jacobian(seed, temperature):
    """g(T, ε) → ‖J u‖ as ε → 0, with an O(ε) error; and g ≤ √2/ε for every ε."""
    rng = np.random.default_rng(seed)
    logits = jnp.asarray(rng.normal(size=(64, TOKENS)) * 0.5)
    mask = jnp.asarray(np.arange(TOKENS) < rng.integers(2, TOKENS + 1, size=(64, 1)))
    u = g.random_unit_directions(jax.random.key(seed % 1000), logits.shape, mask, dtype=jnp.float64)
    alpha = g.Softmax(temperature)(logits, mask)
    ju = np.linalg.norm(np.einsum("rij,rj->ri", np.asarray(g.softmax_jacobian(alpha, temperature)),
                                  np.asarray(u)), axis=-1)
    errors = []  # in units of the Jacobian's scale 1/T
    for eps in (1e-2 * temperature, 1e-3 * temperature, 1e-4 * temperature):
        fd = np.asarray(g.fd_sensitivity(logits, u, temperature, eps, mask))
        errors.append(np.max(np.abs(fd - ju)) * temperature)
    assert errors[-1] < 1e-3
    for coarse, fine in zip(errors, errors[1:]):  # first order in ε, down to round-off
        assert fine < 0.2 * coarse or fine < 1e-9
    big = np.asarray(g.fd_sensitivity(logits, u, temperature, 10.0, mask))
    assert np.all(big <= math.sqrt(2) / 10 + 1e-12)
    assert np.all(ju <= np.asarray(g.softmax_jacobian_norm(alpha, temperature)) * (1 + 1e-9) + 1e-15)


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
def test_random_set_formula_vs_exact_and_monte_carlo():
    """formula ≤ exact expectation (Jensen gap ≥ 0), and Monte Carlo → exact within its error."""
    rng = np.random.default_rng(2)
    rows, tokens = 6, 8
    context = np.array([2, 3, 5, 8, 8, 7])
    alpha, _ = _attention(rng, scale=1.5, ties=False, context=context, tokens=tokens, heads=2,
                          rows=rows)
    x = _vectors(rng, duplicates=False, tokens=tokens, heads=2, dim=3)
    ja, jx, jc = jnp.asarray(alpha), jnp.asarray(x), jnp.asarray(context, jnp.int32)
    for n in (1, 2, 4):
        formula = np.asarray(g.random_set_distance(ja, jx, jc, n))
        vector = np.asarray(g.random_set_distances(ja, jx, jc, jnp.asarray([n])))[..., 0]
        assert np.allclose(formula, vector)
        mc, sem = (np.asarray(a) for a in g.random_set_distance_mc(jax.random.key(n), ja, jx, jc, n,
                                                                   samples=4000))
        for h, r in itertools.product(range(2), range(rows)):
            L = context[r]
            if L <= n:
                assert formula[h, r] == 0 and mc[h, r] == 0
                continue
            exact = _exact_random_expectation(alpha[h, r, :L], x[h, :L], n)
            assert formula[h, r] <= exact * (1 + 1e-12)
            assert abs(mc[h, r] - exact) <= 5 * sem[h, r] + 1e-12


@PROPERTY
@given(seed=st.integers(0, 2 ** 32 - 1), n=st.integers(1, TOKENS - 1), scale=st.sampled_from([0.3, 3.0]))
def test_random_formula_below_monte_carlo(seed, n, scale):
    """Jensen: the closed form never exceeds the Monte Carlo mean beyond its error bar."""
    rng = np.random.default_rng(seed)
    context = np.full(ROWS, TOKENS)
    alpha, _ = _attention(rng, scale=scale, ties=False, context=context)
    x = jnp.asarray(_vectors(rng, duplicates=False))
    alpha, context = jnp.asarray(alpha), jnp.asarray(context, jnp.int32)
    formula, mc, sem = _jensen(alpha, x, context, n, jax.random.key(seed % 2 ** 31))
    assert np.all(np.asarray(formula) <= np.asarray(mc) + 5 * np.asarray(sem) + 1e-12)


@functools.partial(jax.jit, static_argnames=())
def _jensen(alpha, x, context, n, key):
    mc, sem = g.random_set_distance_mc(key, alpha, x, context, n, samples=1024)
    return g.random_set_distance(alpha, x, context, n), mc, sem


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_host_sort_matches_device_sort(dtype):
    rng = np.random.default_rng(1)
    context = rng.integers(1, 40, size=30)
    alpha, _ = _attention(rng, scale=2.0, ties=True, context=context, tokens=40, heads=3, rows=30)
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
        pts = xs[h, o[h, r, :m + 1]]
        want = min(np.sum((pts[a] - pts[b]) ** 2) for a in range(m + 1) for b in range(a))
        assert table[h, r, m] == pytest.approx(want, abs=1e-9)
