"""The generic local-field ODE on the full Gram matrix with every field sampled (the
reference for [`FullField`][]), and the per-sample increment of the overlaps
it averages ([`sample_increment`][]), which the diffusion matrix of the SDE also uses
(`headflow.dynamics.sde`)."""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ..._model import SIGNAL, AttentionBase
from ..._overlaps import FieldLaw, Overlaps
from ..._risk import key_dims, over_theta, split_key_normals
from ..._steps import StepSizes
from ...expectations import AbstractExpectation, AbstractNodes
from ...fields._base import AbstractField, outer_sum
from ._full import assemble
from ._nodes import MAX_GROUP, full_nodes


def split_full_node(model: AttentionBase, x: Float[Array, " d"]):
    """Split one node of dimension `full_dims(model)` into `(θ-normals, g* (F, L), g⊥ (H, L),
    g^ν (H+1, L), ξ)`."""
    H, L = model.H, model.L
    k = key_dims(model)
    tn, g_star, g_perp = split_key_normals(model, x[:k])
    return tn, g_star, g_perp, x[k:k + L * (H + 1)].reshape(H + 1, L), x[-1]


def sample_increment(model: AttentionBase, steps: StepSizes, ov: Overlaps, law: FieldLaw,
                     x: Float[Array, " d"], theta: Float[Array, " F"], *,
                     sgd_noise: bool = True) -> Overlaps:
    """`U`: D times the change of the overlaps in one online SGD step, for one sample (the
    node `x` of all fields, `full_dims(model)` normals, and the latent coefficients `θ`), in the
    limit where the tokens are orthonormal at scale D (`docs/sde.md#the-per-sample-increment`).

    With `G_{iℓ} = ∂ℓ/∂λ_{iℓ}` for the student rows `i ∈ {K, V}` (autodiff of
    [`headflow.dynamics.Model.loss`][]), `λ*` the teacher's fields and `λ` the students':

    - `U_{ij*} = −η Σ_ℓ G_{iℓ} λ*_{jℓ} − ηλ Ω_{ij*}`
    - `U_{ij} = −η Σ_ℓ (G_{iℓ} λ_{jℓ} + G_{jℓ} λ_{iℓ}) + (η²/B) Σ_ℓ G_{iℓ} G_{jℓ} − 2ηλ Ω_{ij}`
    - `U_{b_h} = −η_b ∂ℓ/∂b_h`

    Its mean over the samples is the vector field of the generic ODE; its covariance (divided
    by the batch B) is the diffusion matrix of the SDE. Frozen values give zero value rows.

    **Arguments:** `law` = `FieldLaw.from_overlaps(ov, ρ*, manifold=False)` (built once per
    state), `sgd_noise`: keep the `η²` term.
    """
    _, g_star, g_perp, g_nu, xi = split_full_node(model, x)
    chi_star, chi = law.key_fields(theta, g_star, g_perp)
    z, y_star = law.value_fields(chi_star, g_perp, g_nu)
    y = y_star[SIGNAL] + model.noise * xi
    g_chi, g_z, g_b = jax.grad(model.loss, argnums=(0, 1, 2))(chi, z, ov.b, y)
    G = jnp.concatenate([g_chi, g_z])                                # (2H, L)
    lam_s = jnp.concatenate([chi, z])
    lam_t = jnp.concatenate([chi_star, y_star[None]])                # (F+1, L)
    terms = {"TST": outer_sum(G, lam_t), "TSS": outer_sum(G, lam_s), "gb": g_b}
    if sgd_noise:
        terms["N"] = outer_sum(G, G)
    return assemble(model, steps, sgd_noise, ov, terms)


class SampledFullField(AbstractField):
    """The generic local-field ODE (`docs/ode.md#derivation-of-the-odes`) on the full Gram
    matrix, cross overlaps included: with `G_{iℓ} = ∂ℓ/∂λ_{iℓ}` for the student rows
    `i ∈ {K, V}` (autodiff of [`headflow.dynamics.Model.loss`][]),

    - `dΩ_{ij*}/dt = −η E[Σ_ℓ G_{iℓ} λ_{j*ℓ}] − ηλ Ω_{ij*}`
    - `dΩ_{ij}/dt = −η E[Σ_ℓ (G_{iℓ} λ_{jℓ} + G_{jℓ} λ_{iℓ})] + (η²/B) E[Σ_ℓ G_{iℓ} G_{jℓ}] − 2ηλ
      Ω_{ij}`
    - `db_h/dt = −η_b E[∂ℓ/∂b_h]`

    with every field (values and label noise included) sampled: the nodes span the key fields,
    the value fields and the label noise, `L(2H + F + 1) + 1` dimensions (plus θ's). At each
    node it is the θ-average of the per-sample increment [`sample_increment`][]. Slower to
    converge than [`FullField`][], which integrates the value side exactly; kept as the
    reference it is tested against, and for quantities that are not polynomials of low degree
    in the value fields (the covariance of the per-sample increments, `headflow.dynamics.sde`)."""

    model: AttentionBase
    steps: StepSizes
    nodes: AbstractNodes
    sgd_noise: bool = eqx.field(static=True, default=True)
    batch: int = eqx.field(static=True, default=1)
    chunk: ClassVar[int] = 2048
    manifold_form: ClassVar[bool] = False

    @classmethod
    def build(cls, model: AttentionBase, steps: StepSizes, backend: AbstractExpectation, *,
              sgd_noise: bool = True, max_group: int = MAX_GROUP) -> SampledFullField:
        """The field with `backend`'s nodes over all fields, closed under head
        permutations."""
        return cls(model=model, steps=steps, nodes=full_nodes(model, backend,
                                                              max_group=max_group),
                   sgd_noise=sgd_noise)

    def node_derivative(self, ov: Overlaps, x: Float[Array, " d"]) -> Overlaps:
        law = FieldLaw.from_overlaps(ov, self.model.rho, manifold=False)
        tn, g_star = split_full_node(self.model, x)[:2]
        return over_theta(self.model, tn, g_star, lambda theta: sample_increment(
            self.model, self.steps, ov, law, x, theta, sgd_noise=self.sgd_noise))
