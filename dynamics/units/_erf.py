"""`g(x) = erf(x/√2)`, the sigmoidal unit of Saad & Solla, with its closed-form integrals."""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
import jax.scipy.special as jss
from jaxtyping import Array, Float

from ._base import AbstractUnit, register_unit
from ._tables import pairs


def arcsin(x: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
    """`arcsin x` through the half-angle identity `arcsin x = 2 arctan(x / (1 + √(1 − x²)))`,
    exact in real arithmetic for `|x| ≤ 1` and within a few units in the last place in float64
    (`tests/test_committee_exact.py`). XLA's CPU backend evaluates a float64 arctangent faster
    than its arcsine, and the arcsines of `I2` and `I4` are most of the cost of the erf
    committee's closed-form vector field (`benchmarks/RESULTS.md`). Outside `[−1, 1]` it is
    NaN, as `arcsin` is."""
    return 2.0 * jnp.arctan(x / (1.0 + jnp.sqrt((1.0 - x) * (1.0 + x))))


@register_unit
class Erf(AbstractUnit):
    """`g(x) = erf(x/√2)`, `g'(x) = √(2/π) e^{−x²/2}`. The integrals
    (`docs/committee.md#exact-gaussian-integrals`), with `C` the covariance of the fields in the
    order named and `Λ4 = (1 + C00)(1 + C11) − C01²`:

    - `I2 = (2/π) arcsin(C01 / √((1 + C00)(1 + C11)))`
    - `J2 = (2/π) / √(1 + C00 + C11 + C00 C11 − C01²)`
    - `I3 = (2/π) (C12 (1 + C00) − C01 C02) / ((1 + C00) √((1 + C00)(1 + C22) − C02²))`
    - `I4 = (4/π²) arcsin(Λ0 / √(Λ1 Λ2)) / √Λ4`.
    """

    name: ClassVar[str] = "erf"
    label: ClassVar[str] = "erf(x/√2)"
    exact: ClassVar[bool] = True

    def __call__(self, x: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        return jss.erf(x / jnp.sqrt(2.0))


    def i2(self, C: Float[Array, "*batch 2 2"]) -> Float[Array, "*batch"]:
        c00, c11, c01 = C[..., 0, 0], C[..., 1, 1], C[..., 0, 1]
        return (2.0 / jnp.pi) * arcsin(c01 / jnp.sqrt((1.0 + c00) * (1.0 + c11)))

    def j2(self, C: Float[Array, "*batch 2 2"]) -> Float[Array, "*batch"]:
        c00, c11, c01 = C[..., 0, 0], C[..., 1, 1], C[..., 0, 1]
        return (2.0 / jnp.pi) / jnp.sqrt(1.0 + c00 + c11 + c00 * c11 - c01**2)

    def i3(self, C: Float[Array, "*batch 3 3"]) -> Float[Array, "*batch"]:
        c00, c22 = C[..., 0, 0], C[..., 2, 2]
        c01, c02, c12 = C[..., 0, 1], C[..., 0, 2], C[..., 1, 2]
        lam3 = (1.0 + c00) * (1.0 + c22) - c02**2
        return (2.0 / jnp.pi) * (c12 * (1.0 + c00) - c01 * c02) / ((1.0 + c00) * jnp.sqrt(lam3))

    def i4(self, C: Float[Array, "*batch 4 4"]) -> Float[Array, "*batch"]:
        c = [[C[..., i, j] for j in range(4)] for i in range(4)]
        a0, a1 = 1.0 + c[0][0], 1.0 + c[1][1]
        lam4 = a0 * a1 - c[0][1] ** 2
        lam0 = (lam4 * c[2][3] - c[1][2] * c[1][3] * a0 - c[0][2] * c[0][3] * a1
                + c[0][1] * c[0][2] * c[1][3] + c[0][1] * c[0][3] * c[1][2])
        lam1 = (lam4 * (1.0 + c[2][2]) - c[1][2] ** 2 * a0 - c[0][2] ** 2 * a1
                + 2.0 * c[0][1] * c[0][2] * c[1][2])
        lam2 = (lam4 * (1.0 + c[3][3]) - c[1][3] ** 2 * a0 - c[0][3] ** 2 * a1
                + 2.0 * c[0][1] * c[0][3] * c[1][3])
        return (4.0 / jnp.pi**2) * arcsin(lam0 / jnp.sqrt(lam1 * lam2)) / jnp.sqrt(lam4)

    def i3_table(self, C: Float[Array, "P P"], S: int) -> Float[Array, "S P P"]:
        # the square root depends on (i, a) only: S·P roots, not S·P²
        d = 1.0 + jnp.diagonal(C)
        Ci, ai = C[:S], d[:S, None, None]
        root = jnp.sqrt(ai[:, :, 0] * d[None, :] - Ci**2)[:, None, :]     # (S, 1, P)
        num = C[None, :, :] * ai - Ci[:, :, None] * Ci[:, None, :]
        return (2.0 / jnp.pi) * num / (ai * root)

    def i4_pairs(self, C: Float[Array, "P P"], S: int) -> Float[Array, "SS PP"]:
        # Λ4 depends on {i, k} and Λ1 on ({i, k}, a) only: their roots are taken once each.
        # The argument of the arcsine is formed for every (a, b) by broadcasting (no gathers),
        # and the arcsine only for the pairs a ≤ b.
        d = 1.0 + jnp.diagonal(C)
        P = C.shape[-1]
        ik, ab = pairs(S), pairs(P)
        i, k = ik[:, 0], ik[:, 1]
        a0, a1, cik = d[i][:, None], d[k][:, None], C[i, k][:, None]       # (pairs, 1)
        ci, ck = C[i], C[k]                                                # (pairs, P)
        lam4 = a0 * a1 - cik**2
        lam1 = lam4 * d[None, :] - ck**2 * a0 - ci**2 * a1 + 2.0 * cik * ci * ck
        r1 = 1.0 / jnp.sqrt(lam1)
        a0, a1, cik, lam4_ = a0[..., None], a1[..., None], cik[..., None], lam4[..., None]
        cia, cib, cka, ckb = ci[:, :, None], ci[:, None, :], ck[:, :, None], ck[:, None, :]
        lam0 = (lam4_ * C[None] - cka * ckb * a0 - cia * cib * a1
                + cik * (cia * ckb + cib * cka))
        x = (lam0 * r1[:, :, None] * r1[:, None, :]).reshape(len(ik), P * P)
        return (4.0 / jnp.pi**2) * arcsin(x[:, ab[:, 0] * P + ab[:, 1]]) / jnp.sqrt(lam4)
