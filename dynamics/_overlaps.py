"""Order parameters (`docs/model.md#order-parameters`) and the Gaussian law of the local fields
they determine (`docs/model.md#the-law-of-the-local-fields`).

Given the student's weights, the fields `λ_ℓ = W x_ℓ/√D` of one token are *exactly* Gaussian
with covariance the Gram matrix `Ω = W Wᵀ/D` (plus the mean `Ω_{·K*} θ` on the signal token),
at any D. So everything the ODE and the simulator's test risk need is a function of
[`Overlaps`][], sampled through [`FieldLaw`][].
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._errors import HeadflowError
from ._layout import ATTENTION
from ._linalg import psd_part, psd_pinv_sqrt, psd_sqrt
from ._value_moments import SIGNAL, ValueMoments

ORDER_PARAMETERS = ATTENTION.names
"""The order parameters on the invariant manifold: `m, q, n, s, b`."""

CROSS_OVERLAPS = ATTENTION.cross
"""The cross overlaps between keys and values (zero on the invariant manifold): `kv, kvs,
vks`."""


class Overlaps(eqx.Module):
    """The order parameters of H heads against F teacher key directions and `v*`.

    | field | definition | shape |
    |---|---|---|
    | `m` | `K K*ᵀ/D` | H×F |
    | `q` | `K Kᵀ/D` | H×H |
    | `n` | `V v*/D` | H |
    | `s` | `V Vᵀ/D` | H×H |
    | `b` | biases | H |
    | `kv` | `K Vᵀ/D` | H×H |
    | `kvs` | `K v*/D` | H |
    | `vks` | `V K*ᵀ/D` | H×F |

    The last three (cross overlaps) vanish on the invariant manifold. Leaves may carry leading
    batch axes (seeds, times); the methods below act on one state (`jax.vmap` them).
    """

    m: Float[Array, "*batch H F"]
    q: Float[Array, "*batch H H"]
    n: Float[Array, "*batch H"]
    s: Float[Array, "*batch H H"]
    b: Float[Array, "*batch H"]
    kv: Float[Array, "*batch H H"]
    kvs: Float[Array, "*batch H"]
    vks: Float[Array, "*batch H F"]

    @classmethod
    def manifold(cls, m, q, n, s, b) -> Overlaps:
        """A state on the invariant manifold (cross overlaps zero)."""
        m, q, n, s, b = (jnp.asarray(x) for x in (m, q, n, s, b))
        return cls(m=m, q=q, n=n, s=s, b=b, kv=jnp.zeros_like(q), kvs=jnp.zeros_like(n),
                   vks=jnp.zeros_like(m))

    @property
    def H(self) -> int:
        return self.m.shape[-2]

    @property
    def F(self) -> int:
        return self.m.shape[-1]

    @property
    def r(self) -> Float[Array, "*batch H H"]:
        """`r = q − m mᵀ`: the key overlaps orthogonal to the teacher's key directions."""
        return self.q - self.m @ jnp.swapaxes(self.m, -1, -2)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every order parameter as a numpy array, by name (the `sgd.npz`/`ode.npz` names)."""
        return {name: np.asarray(getattr(self, name))
                for name in ORDER_PARAMETERS + CROSS_OVERLAPS}

    def on_manifold(self) -> Overlaps:
        """Project onto the invariant manifold (drop the cross overlaps)."""
        return Overlaps.manifold(self.m, self.q, self.n, self.s, self.b)

    def nearest_valid(self, rho: float | Float[Array, ""]) -> Overlaps:
        """The nearest valid state on the manifold: the parts orthogonal to the teacher,
        `r = q − m mᵀ` and `s − n nᵀ/ρ*`, with negative eigenvalues clipped to zero.

        Long-time states sit at the edge of the PSD cone (`r → 0` at every minimum found), where
        an integration can overshoot by round-off-sized negative eigenvalues; a new integration
        from such a state would be refused by the initial-state check."""
        q = self.m @ self.m.T + psd_part(self.r)
        nn = jnp.outer(self.n, self.n) / rho
        return Overlaps.manifold(m=self.m, q=q, n=self.n, s=nn + psd_part(self.s - nn), b=self.b)

    def cross_size(self) -> Float[Array, "*batch"]:
        """Largest absolute cross overlap (0 on the manifold)."""
        return jnp.maximum(jnp.max(jnp.abs(self.kv), axis=(-1, -2)),
                           jnp.maximum(jnp.max(jnp.abs(self.kvs), axis=-1),
                                       jnp.max(jnp.abs(self.vks), axis=(-1, -2))))

    def student_gram(self) -> Float[Array, "H2 H2"]:
        """`[K; V][K; V]ᵀ/D`."""
        return jnp.block([[self.q, self.kv], [self.kv.T, self.s]])

    def gram(self, rho: float | Float[Array, ""]) -> Float[Array, "P P"]:
        """The full Gram matrix `Ω` over `[K (H), V (H), K* (F), v* (1)]`."""
        return _gram_blocks(jnp, self, rho)

    @classmethod
    def from_student_rows(cls, rows: Float[Array, "H2 P"], b: Float[Array, " H"], F: int
                          ) -> Overlaps:
        """From the student rows `[K; V] Wᵀ/D` of the Gram matrix (`W = [K; V; K*; v*]`)."""
        H = b.shape[-1]
        K, V = rows[:H], rows[H:]
        return cls(m=K[:, 2 * H:2 * H + F], q=K[:, :H], n=V[:, 2 * H + F], s=V[:, H:2 * H],
                   b=b, kv=K[:, H:2 * H], kvs=K[:, 2 * H + F], vks=V[:, 2 * H:2 * H + F])

    def check_psd(self, rho: float, *, what: str = "overlaps", tol: float = 1e-9) -> None:
        """Raise a one-line error unless the Gram matrix is a valid (PSD) Gram matrix (a host
        check, in numpy: no compilation)."""
        gram = _gram_blocks(np, self, float(rho), lambda x: np.asarray(x, dtype=np.float64))
        finite = bool(np.all(np.isfinite(gram)))
        lam = float(np.linalg.eigvalsh(0.5 * (gram + gram.T))[0]) if finite else float("nan")
        scale = max(1.0, float(np.max(np.abs(gram)))) if finite else 1.0
        if not np.isfinite(lam) or lam < -tol * scale:
            raise HeadflowError(
                f"{what} are not a valid Gram matrix (smallest eigenvalue {lam:.3g} < 0): "
                "need q − m mᵀ PSD, |n|, |s| consistent with ρ*; build them from weights or "
                "project with Overlaps.on_manifold()")


class FieldLaw(eqx.Module):
    """The Gaussian law of one token's fields given the overlaps, as a chain
    (`docs/model.md#the-law-of-the-local-fields`):

    - teacher key fields `χ*_ℓ = θ δ_{ℓ1} + g*_ℓ`;
    - student key fields `χ_ℓ = m χ*_ℓ + r^{1/2} g⊥_ℓ`;
    - value fields `(z_ℓ, y*_ℓ) = B⊥ g⊥_ℓ + B* χ*_ℓ + Σ^{1/2} g^ν_ℓ`.

    On the manifold `B⊥ = B* = 0` and `Σ = [[s, n], [nᵀ, ρ*]]`; off the manifold they come from
    Gaussian conditioning on the key fields. Given the key fields, the value fields are then
    Gaussian with moments [`ValueMoments`][], which lets the risk integrate them exactly.
    """

    m: Float[Array, "H F"]
    r_half: Float[Array, "H H"]
    b_perp: Float[Array, "H1 H"]
    b_star: Float[Array, "H1 F"]
    sigma: Float[Array, "H1 H1"]

    @classmethod
    def from_overlaps(cls, ov: Overlaps, rho: float | Float[Array, ""], *,
                      manifold: bool = False) -> FieldLaw:
        """**Arguments:** `ov` one state, `rho` = ρ*, `manifold`: treat the cross overlaps as
        zero (the fast path; no pseudo-inverse). **Returns:** the field law."""
        H, F = ov.H, ov.F
        r = ov.r
        r_half = psd_sqrt(r)
        value_block = jnp.block([[ov.s, ov.n[:, None]], [ov.n[None, :], jnp.full((1, 1), rho)]])
        if manifold:
            return cls(m=ov.m, r_half=r_half, b_perp=jnp.zeros((H + 1, H)),
                       b_star=jnp.zeros((H + 1, F)), sigma=value_block)
        # Cov(ν, χ*) = Ω_{ν K*};  Cov(ν, χ) = Ω_{ν K} = B⊥ r^{1/2} + B* mᵀ.
        nu_kstar = jnp.concatenate([ov.vks, jnp.zeros((1, F))])
        nu_k = jnp.concatenate([ov.kv.T, ov.kvs[None, :]])
        b_perp = (nu_k - nu_kstar @ ov.m.T) @ psd_pinv_sqrt(r)
        sigma = value_block - b_perp @ b_perp.T - nu_kstar @ nu_kstar.T
        return cls(m=ov.m, r_half=r_half, b_perp=b_perp, b_star=nu_kstar, sigma=sigma)

    def key_fields(self, theta: Float[Array, " F"], g_star: Float[Array, "F L"],
                   g_perp: Float[Array, "H L"]
                   ) -> tuple[Float[Array, "F L"], Float[Array, "H L"]]:
        """`(χ*, χ)` from standard normals (tokens along the last axis)."""
        L = g_star.shape[-1]
        chi_star = g_star + theta[:, None] * (jnp.arange(L) == SIGNAL)[None, :]
        return chi_star, _matmul(self.m, chi_star) + _matmul(self.r_half, g_perp)

    def value_means(self, chi_star: Float[Array, "F L"],
                    g_perp: Float[Array, "H L"]) -> Float[Array, "H1 L"]:
        """`E[(z_ℓ, y*_ℓ) | key fields]` for every token (rows: the H value fields, then the
        teacher's); the covariance given the keys is `sigma` on every token, and tokens are
        independent."""
        return _matmul(self.b_perp, g_perp) + _matmul(self.b_star, chi_star)

    def value_moments(self, chi_star: Float[Array, "F L"],
                      g_perp: Float[Array, "H L"]) -> ValueMoments:
        """Moments of `(z, y*)` given the key fields."""
        H = self.m.shape[0]
        mean = self.value_means(chi_star, g_perp)
        return ValueMoments(mz=mean[:H], my=mean[H, SIGNAL], szz=self.sigma[:H, :H],
                            szy=self.sigma[:H, H], syy=self.sigma[H, H])

    def value_fields(self, chi_star: Float[Array, "F L"], g_perp: Float[Array, "H L"],
                     g_nu: Float[Array, "H1 L"]
                     ) -> tuple[Float[Array, "H L"], Float[Array, " L"]]:
        """A draw of `(z, y*)` given the key fields."""
        H = self.m.shape[0]
        nu = (_matmul(self.b_perp, g_perp) + _matmul(self.b_star, chi_star)
              + _matmul(psd_sqrt(self.sigma), g_nu))
        return nu[:H], nu[H]


def _matmul(a: Float[Array, "i j"], b: Float[Array, "j k"]) -> Float[Array, "i k"]:
    """`a @ b` for tiny matrices as a broadcast sum: under `vmap` over many samples this is far
    faster on CPU than a batched matrix product."""
    return jnp.sum(a[:, :, None] * b[None, :, :], axis=1)


_GRAM_LEAVES = ("m", "q", "n", "s", "kv", "kvs", "vks")


def _gram_blocks(xp, ov: Overlaps, rho, as_array=lambda x: x):
    """`Ω` over `[K, V, K*, v*]` from the overlap blocks of `ov` (each through `as_array`),
    with `xp` = `jax.numpy` (traced) or `numpy` (a host check without compilation)."""
    m, q, n, s, kv, kvs, vks = (as_array(getattr(ov, k)) for k in _GRAM_LEAVES)
    F = m.shape[-1]
    st = xp.block([[m, kvs[:, None]], [vks, n[:, None]]])
    tt = xp.diag(xp.concatenate([xp.ones(F), xp.full((1,), rho)]))
    return xp.block([[xp.block([[q, kv], [kv.T, s]]), st], [st.T, tt]])
