"""The generic local-field ODE on the full Gram matrix (cross overlaps kept)."""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._model import SIGNAL, Model
from .._overlaps import FieldLaw, Overlaps
from .._risk import key_dims, over_theta, split_key_normals
from .._steps import StepSizes
from ..expectations import AbstractExpectation, AbstractNodes
from ._base import AbstractField, outer_sum
from ._nodes import MAX_GROUP, full_nodes


class FullField(AbstractField):
    """The generic local-field ODE (`docs/ode.md#derivation-of-the-odes`) on the full Gram
    matrix, cross overlaps included: with `G_{iℓ} = ∂ℓ/∂λ_{iℓ}` for the student rows
    `i ∈ {K, V}` (autodiff of [`dynamics.Model.loss`][]),

    - `dΩ_{ij*}/dt = −η E[Σ_ℓ G_{iℓ} λ_{j*ℓ}] − ηλ Ω_{ij*}`
    - `dΩ_{ij}/dt = −η E[Σ_ℓ (G_{iℓ} λ_{jℓ} + G_{jℓ} λ_{iℓ})] + (η²/B) E[Σ_ℓ G_{iℓ} G_{jℓ}] − 2ηλ
      Ω_{ij}`
    - `db_h/dt = −η_b E[∂ℓ/∂b_h]`

    with every field (values and label noise included) sampled."""

    model: Model
    steps: StepSizes
    nodes: AbstractNodes
    sgd_noise: bool = eqx.field(static=True, default=True)
    chunk: ClassVar[int] = 2048

    @classmethod
    def build(cls, model: Model, steps: StepSizes, backend: AbstractExpectation, *,
              sgd_noise: bool = True, max_group: int = MAX_GROUP) -> FullField:
        """The field with `backend`'s nodes over all fields, closed under head
        permutations."""
        return cls(model=model, steps=steps, nodes=full_nodes(model, backend,
                                                              max_group=max_group),
                   sgd_noise=sgd_noise)

    def node_derivative(self, ov: Overlaps, x: Float[Array, " d"]) -> Overlaps:
        model, hp = self.model, self.steps
        H, L = model.H, model.L
        law = FieldLaw.from_overlaps(ov, model.rho, manifold=False)
        k = key_dims(model)
        tn, g_star, g_perp = split_key_normals(model, x[:k])
        g_nu = x[k:k + L * (H + 1)].reshape(H + 1, L)
        xi = x[-1]

        def at(theta):
            chi_star, chi = law.key_fields(theta, g_star, g_perp)
            z, y_star = law.value_fields(chi_star, g_perp, g_nu)
            y = y_star[SIGNAL] + model.noise * xi
            g_chi, g_z, g_b = jax.grad(model.loss, argnums=(0, 1, 2))(chi, z, ov.b, y)
            G = jnp.concatenate([g_chi, g_z])                        # (2H, L)
            lam_s = jnp.concatenate([chi, z])
            lam_t = jnp.concatenate([chi_star, y_star[None]])        # (F+1, L)
            out = {"TST": outer_sum(G, lam_t), "TSS": outer_sum(G, lam_s), "gb": g_b}
            if self.sgd_noise:
                out["N"] = outer_sum(G, G)
            return out

        E = over_theta(model, tn, at)
        eta, lam = hp.lr, hp.weight_decay
        omega = ov.gram(model.rho)
        st = omega[:2 * H, 2 * H:]
        ss = omega[:2 * H, :2 * H]
        d_st = -eta * E["TST"] - eta * lam * st
        d_ss = -eta * (E["TSS"] + E["TSS"].T) - 2 * eta * lam * ss
        if self.sgd_noise:
            d_ss = d_ss + eta**2 / hp.batch * E["N"]
        if not model.train_values:
            frozen = jnp.arange(2 * H) >= H
            d_st = jnp.where(frozen[:, None], 0.0, d_st)
            d_ss = jnp.where(frozen[:, None] | frozen[None, :], 0.0, d_ss)
        rows = jnp.concatenate([d_ss, d_st], axis=1)                 # (2H, 2H + F + 1)
        return Overlaps.from_student_rows(rows, -hp.lr_bias * E["gb"], model.F)
