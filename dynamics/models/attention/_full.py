"""The generic local-field ODE on the full Gram matrix (cross overlaps kept), with the value
fields, the teacher's value field and the label noise integrated out exactly."""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ..._model import SIGNAL, AttentionBase, ValueMoments
from ..._overlaps import FieldLaw, Overlaps
from ..._risk import over_theta, split_key_normals
from ..._steps import StepSizes
from ...expectations import AbstractExpectation, AbstractNodes
from ...fields._base import AbstractField, outer_sum
from ...fields._moments import fourth_moment, third_moment
from ._nodes import MAX_GROUP, key_nodes


def assemble(model: AttentionBase, steps: StepSizes, sgd_noise: bool, ov: Overlaps,
             E: dict[str, Array]) -> Overlaps:
    """`dΩ/dt` and `db/dt` of the generic local-field ODE from the expectations
    `TST = E[Σ_ℓ G_ℓ λ*_ℓᵀ]` (2H × (F+1)), `TSS = E[Σ_ℓ G_ℓ λ_ℓᵀ]` (2H × 2H),
    `N = E[Σ_ℓ G_ℓ G_ℓᵀ]` (2H × 2H) and `gb = E[∂ℓ/∂b]` (the student rows `[K; V]`, the teacher
    rows `[K*; v*]`; `docs/ode.md#derivation-of-the-odes`)."""
    H, eta, lam = model.H, steps.lr, steps.weight_decay
    omega = ov.gram(model.rho)
    st = omega[:2 * H, 2 * H:]
    ss = omega[:2 * H, :2 * H]
    d_st = -eta * E["TST"] - eta * lam * st
    d_ss = -eta * (E["TSS"] + E["TSS"].T) - 2 * eta * lam * ss
    if sgd_noise:
        d_ss = d_ss + eta**2 / steps.batch * E["N"]
    if not model.train_values:
        frozen = jnp.arange(2 * H) >= H
        d_st = jnp.where(frozen[:, None], 0.0, d_st)
        d_ss = jnp.where(frozen[:, None] & frozen[None, :], 0.0, d_ss)
        # a frozen value is v*, so its overlap with key h is kvs_h = k_h·v*/D and moves with it
        d_kv = jnp.broadcast_to(d_st[:H, -1][:, None], (H, H))
        d_ss = d_ss.at[:H, H:].set(d_kv).at[H:, :H].set(d_kv.T)
    rows = jnp.concatenate([d_ss, d_st], axis=1)                 # (2H, 2H + F + 1)
    return Overlaps.from_student_rows(rows, -steps.lr_bias * E["gb"], model.F)


def value_integrated_terms(model: AttentionBase, law: FieldLaw, chi_star: Float[Array, "F L"],
                           chi: Float[Array, "H L"], g_perp: Float[Array, "H L"],
                           b: Float[Array, " H"], sgd_noise: bool) -> dict[str, Array]:
    """The expectations of [`assemble`][] given the key fields, with the value fields
    `ν_ℓ = (z_ℓ, y*_ℓ)` and the label noise integrated out.

    Given the keys, `ν_ℓ ~ N(μ_ℓ, Σ)` independently across tokens (the field law), and every
    factor of the per-sample terms is a linear form in `ν` and ξ: the error
    `e = ŷ − y = Σ_ℓ A_ℓ·z_ℓ − y*_1 − Δξ`, its key derivative `w_{hℓ} = ∂e/∂χ_{hℓ}` (the
    attention Jacobian applied to `z`), `z_{kℓ}` and `y*_ℓ`. The terms are products of two
    (drift), three (drift against value fields) or four (SGD noise) of them, so they follow from
    the means and covariances of those forms by Isserlis' theorem ([`third_moment`][],
    [`fourth_moment`][]). `E[e²]`, `E[e w]` and `E[e ∂e/∂b]` are autodiff of
    [`headflow.dynamics.Model.conditional_error`][]: the same predictor code as everywhere else.
    """
    H, L = chi.shape
    S = law.sigma                                                   # Cov(ν_ℓ) given the keys
    Szz, Szy = S[:H, :H], S[:H, H]
    mu = law.value_means(chi_star, g_perp)                           # (H+1, L)
    muz, muy = mu[:H], mu[H]
    vm = ValueMoments(mz=muz, my=muy[SIGNAL], szz=Szz, szy=Szy, syy=S[H, H])

    def half_e2(c, bb):
        return 0.5 * model.conditional_error(c, bb, vm)

    half, (G, gb) = jax.value_and_grad(half_e2, argnums=(0, 1))(chi, b)   # G = E[e w]
    e2 = 2.0 * half                                                  # E[e²]
    A = model.attention(chi, b)
    signal = (jnp.arange(L) == SIGNAL).astype(A.dtype)
    ebar = jnp.sum(A * muz) - muy[SIGNAL]                            # E[e]
    coef = jnp.concatenate([A, -signal[None, :]])                    # e's coefficients on ν_ℓ
    cov_e = jnp.sum(S[:, :, None] * coef[None, :, :], axis=1)        # Cov(e, ν_ℓ): (H+1, L)
    e_ez = ebar * muz + cov_e[:H]                                    # E[e z_kℓ]
    e_ey = ebar * muy + cov_e[H]                                     # E[e y*_ℓ]
    J = jax.jacrev(model.attention)(chi, b)                          # J[a, p, h, ℓ]
    wbar = jnp.sum(J * muz[:, :, None, None], axis=(0, 1))           # E[w_hℓ]
    Jd = jnp.sum(J * jnp.eye(L, dtype=J.dtype)[None, :, None, :], axis=1)   # J[a, ℓ, h, ℓ]
    e_wz = (wbar[:, None, :] * muz[None, :, :]                       # E[w_hℓ z_kℓ]: (h, k, ℓ)
            + jnp.sum(Jd[:, :, None, :] * Szz[:, None, :, None], axis=0))
    e_wy = wbar * muy[None, :] + jnp.sum(Jd * Szy[:, None, None], axis=0)   # E[w_hℓ y*_ℓ]
    e_wz_e = third_moment(ebar, wbar[:, None, :], muz[None, :, :], G[:, None, :],
                          e_ez[None, :, :], e_wz)                    # E[e w_hℓ z_kℓ]
    e_wy_e = third_moment(ebar, wbar, muy[None, :], G, e_ey[None, :], e_wy)   # E[e w y*]
    out = {
        "TST": jnp.concatenate([
            jnp.concatenate([outer_sum(G, chi_star), jnp.sum(e_wy_e, axis=-1)[:, None]], 1),
            jnp.concatenate([ebar * outer_sum(A, chi_star), outer_sum(A, e_ey[None, :])], 1)]),
        "TSS": jnp.concatenate([
            jnp.concatenate([outer_sum(G, chi), jnp.sum(e_wz_e, axis=-1)], 1),
            jnp.concatenate([ebar * outer_sum(A, chi), outer_sum(A, e_ez)], 1)]),
        "gb": gb,
    }
    if sgd_noise:
        sJ = jnp.sum(Szz[:, :, None, None, None] * J[None], axis=1)  # Σ_a Szz[b, a] J[a, …]
        cov_ww = jnp.sum(sJ[:, :, :, None, :] * J[:, :, None, :, :], axis=(0, 1))   # (h, k, ℓ)
        e_ww = wbar[:, None, :] * wbar[None, :, :] + cov_ww
        e2_ww = fourth_moment(ebar, ebar, wbar[:, None, :], wbar[None, :, :], e2,
                              G[:, None, :], G[None, :, :], G[:, None, :], G[None, :, :],
                              e_ww)                                  # E[e² w_hℓ w_kℓ]
        e2_w = third_moment(ebar, ebar, wbar, e2, G, G)              # E[e² w_hℓ]
        nkv = outer_sum(e2_w, A)
        out["N"] = jnp.concatenate([
            jnp.concatenate([jnp.sum(e2_ww, axis=-1), nkv], 1),
            jnp.concatenate([nkv.T, e2 * outer_sum(A, A)], 1)])
    return out


class FullField(AbstractField):
    """The generic local-field ODE (`docs/ode.md#derivation-of-the-odes`) on the full Gram
    matrix, cross overlaps included: with `G_{iℓ} = ∂ℓ/∂λ_{iℓ}` for the student rows
    `i ∈ {K, V}` (autodiff of [`headflow.dynamics.Model.loss`][]'s predictor),

    - `dΩ_{ij*}/dt = −η E[Σ_ℓ G_{iℓ} λ_{j*ℓ}] − ηλ Ω_{ij*}`
    - `dΩ_{ij}/dt = −η E[Σ_ℓ (G_{iℓ} λ_{jℓ} + G_{jℓ} λ_{iℓ})]
      + (η²/B) E[Σ_ℓ G_{iℓ} G_{jℓ}] − 2ηλ Ω_{ij}`
    - `db_h/dt = −η_b E[∂ℓ/∂b_h]`

    The value fields, the teacher's value field and the label noise are integrated out exactly
    given the key fields (`value_integrated_terms`), so the nodes span only θ and the key
    fields, `L(H + F)` dimensions: the same as the manifold form, against `L(2H + F + 1) + 1`
    for [`SampledFullField`][], with a smaller error at the same number of nodes.
    """

    model: AttentionBase
    steps: StepSizes
    nodes: AbstractNodes
    sgd_noise: bool = eqx.field(static=True, default=True)
    batch: int = eqx.field(static=True, default=1)
    chunk: ClassVar[int] = 2048
    manifold_form: ClassVar[bool] = False

    @classmethod
    def build(cls, model: AttentionBase, steps: StepSizes, backend: AbstractExpectation, *,
              sgd_noise: bool = True, max_group: int = MAX_GROUP) -> FullField:
        """The field with `backend`'s nodes over the key fields, closed under head
        permutations."""
        return cls(model=model, steps=steps, nodes=key_nodes(model, backend,
                                                             max_group=max_group),
                   sgd_noise=sgd_noise)

    def node_derivative(self, ov: Overlaps, x: Float[Array, " d"]) -> Overlaps:
        model = self.model
        law = FieldLaw.from_overlaps(ov, model.rho, manifold=False)
        tn, g_star, g_perp = split_key_normals(model, x)

        def at(theta):
            chi_star, chi = law.key_fields(theta, g_star, g_perp)
            return value_integrated_terms(model, law, chi_star, chi, g_perp, ov.b,
                                          self.sgd_noise)

        E = over_theta(model, tn, g_star, at)
        return assemble(model, self.steps, self.sgd_noise, ov, E)
