"""The generic local-field ODE on the full Gram matrix with every field sampled (the
reference for [`dynamics.fields.FullField`][], and the per-sample increments of the SDE)."""

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
from ._full import assemble
from ._nodes import MAX_GROUP, full_nodes


class SampledFullField(AbstractField):
    """The generic local-field ODE (`docs/ode.md#derivation-of-the-odes`) on the full Gram
    matrix, cross overlaps included: with `G_{iℓ} = ∂ℓ/∂λ_{iℓ}` for the student rows
    `i ∈ {K, V}` (autodiff of [`dynamics.Model.loss`][]),

    - `dΩ_{ij*}/dt = −η E[Σ_ℓ G_{iℓ} λ_{j*ℓ}] − ηλ Ω_{ij*}`
    - `dΩ_{ij}/dt = −η E[Σ_ℓ (G_{iℓ} λ_{jℓ} + G_{jℓ} λ_{iℓ})] + (η²/B) E[Σ_ℓ G_{iℓ} G_{jℓ}] − 2ηλ
      Ω_{ij}`
    - `db_h/dt = −η_b E[∂ℓ/∂b_h]`

    with every field (values and label noise included) sampled: the nodes span the key fields,
    the value fields and the label noise, `L(2H + F + 1) + 1` dimensions (plus θ's). Slower
    to converge than [`FullField`][], which integrates the value side exactly; kept as the
    reference it is tested against, and for quantities that are not polynomials of low degree
    in the value fields (the covariance of the per-sample increments)."""

    model: Model
    steps: StepSizes
    nodes: AbstractNodes
    sgd_noise: bool = eqx.field(static=True, default=True)
    chunk: ClassVar[int] = 2048
    manifold_form: ClassVar[bool] = False

    @classmethod
    def build(cls, model: Model, steps: StepSizes, backend: AbstractExpectation, *,
              sgd_noise: bool = True, max_group: int = MAX_GROUP) -> SampledFullField:
        """The field with `backend`'s nodes over all fields, closed under head
        permutations."""
        return cls(model=model, steps=steps, nodes=full_nodes(model, backend,
                                                              max_group=max_group),
                   sgd_noise=sgd_noise)

    def node_derivative(self, ov: Overlaps, x: Float[Array, " d"]) -> Overlaps:
        model = self.model
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

        return assemble(model, self.steps, self.sgd_noise, ov, over_theta(model, tn, at))
