"""The exact random pieces of both overlap-space chains (the attention model's and the
family's of `headflow.dynamics.models`): a factor of a PSD Gram matrix, and the Bartlett factor of a
Wishart matrix from exact χ² draws (`docs/overlap-sgd.md`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Bool, Float, PRNGKeyArray

from ._steps import StepSizes

PIVOT_TOL = 1e-10
"""A Cholesky pivot within `PIVOT_TOL·Ω_jj` of zero is a dependent row (exact zero column of
the factor); one below `−PIVOT_TOL·Ω_jj` means Ω is not positive semi-definite."""


def psd_factor(omega: Float[Array, "N N"], tol: float = PIVOT_TOL
               ) -> tuple[Float[Array, "N N"], Bool[Array, ""], Float[Array, ""]]:
    """Lower-triangular `C` with `C Cᵀ = Ω` for positive semi-definite Ω (a pivot within
    `tol·Ω_jj` of zero gives a zero column: a row that depends on the rows before it).

    Written column by column as broadcasts: for the tiny matrices of the chain, under `vmap`,
    this is faster on CPU than LAPACK's batched `potrf` (`benchmarks/bench_overlap_sgd.py`).

    **Returns:** `(C, ok, pivot)`: `ok` is False when a pivot is below `−tol·Ω_jj` or not
    finite; `pivot` is the smallest relative pivot `d_j/Ω_jj` (NaN when not finite).
    """
    N = omega.shape[-1]
    rows = jnp.arange(N)
    cols: list[Array] = []
    ok = jnp.array(True)
    worst = jnp.array(jnp.inf, omega.dtype)
    for j in range(N):
        r = omega[:, j]
        for col in cols:
            r = r - col * col[j]
        d, diag = r[j], omega[j, j]
        keep = d > tol * diag
        col = jnp.where(keep & (rows >= j), r / jnp.sqrt(jnp.where(keep, d, 1.0)), 0.0)
        cols.append(col)
        rel = d / jnp.where(diag > 0, diag, 1.0)
        finite = jnp.isfinite(d) & jnp.isfinite(diag)
        ok = ok & finite & (d >= -tol * jnp.abs(diag)) & (diag >= 0)
        worst = jnp.where(finite, jnp.minimum(worst, rel), jnp.nan)
    return jnp.stack(cols, axis=1), ok, worst


def bartlett(chi2: Float[Array, " p"], below: Float[Array, " pairs"]) -> Float[Array, "p p"]:
    """Bartlett factor `T` (lower triangular, `T Tᵀ ~ Wishart(n, I_p)`): `T_ii = √χ²_{n−i}`
    (`i = 0..p−1`) and standard normals `below` (`p(p−1)/2`, row-major) under the diagonal."""
    p = chi2.shape[-1]
    r, c = np.tril_indices(p, -1)
    index = np.full((p, p), len(r))
    index[r, c] = np.arange(len(r))
    padded = jnp.concatenate([below, jnp.zeros((1,), below.dtype)])
    return padded[index] + jnp.diag(jnp.sqrt(chi2))


def chi_square(key: PRNGKeyArray, df: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
    """Independent `χ²_df = 2·Gamma(df/2)` draws (`df ≥ 2`), exact in law at any df.

    Marsaglia–Tsang rejection sampling, with the acceptance test written with `log1p` so that it
    stays accurate in float64 for `df ~ 10⁹`. It rejects with probability about `0.06/df`, so the
    first proposal almost always suffices; a loop redraws only the rejected ones (proposal `i`
    uses `fold_in(key, i)`, so the draws do not depend on what runs alongside under `vmap`).
    `jax.random.gamma` is exact too but several times slower here
    (`benchmarks/bench_overlap_sgd.py --variants`); a normal approximation is not exact.
    """
    d = 0.5 * df - 1.0 / 3.0
    c = 1.0 / jnp.sqrt(9.0 * d)

    def propose(k):
        kx, ku = jr.split(k)
        x = jr.normal(kx, df.shape, dtype=jnp.float64)
        u = jr.uniform(ku, df.shape, dtype=jnp.float64)
        w = c * x
        ws = jnp.where(w > -1.0, w, 0.0)
        # log u < x²/2 + d − d v + d log v, v = (1 + w)³, without cancelling O(√d) terms
        log_ratio = 0.5 * x**2 + d * (3.0 * (jnp.log1p(ws) - ws) - 3.0 * ws**2 - ws**3)
        return (w > -1.0) & (jnp.log(u) < log_ratio), d * (1.0 + ws) ** 3

    def retry(carry):
        i, ok, value = carry
        ok_i, value_i = propose(jr.fold_in(key, i))
        return i + 1, ok | ok_i, jnp.where(ok, value, value_i)

    ok, value = propose(key)
    _, _, value = jax.lax.while_loop(lambda carry: ~jnp.all(carry[1]), retry,
                                     (jnp.array(1, jnp.uint32), ok, value))
    return 2.0 * value


def as_float64(hp: StepSizes) -> StepSizes:
    """The step sizes as float64 arrays: traced, so new values do not recompile."""
    f64 = lambda x: jnp.asarray(x, jnp.float64)  # noqa: E731
    return StepSizes(lr=f64(hp.lr), lr_bias=f64(hp.lr_bias), weight_decay=f64(hp.weight_decay),
                     batch=hp.batch, lr_schedule=hp.lr_schedule,
                     lr_bias_schedule=hp.lr_bias_schedule)
