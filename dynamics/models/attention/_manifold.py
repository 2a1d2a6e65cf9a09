"""The reduced ODE on the invariant manifold, with the value fields integrated out."""

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
from ...fields._base import AbstractField, outer_sum, zeros_like
from ._nodes import MAX_GROUP, key_nodes


class ManifoldField(AbstractField):
    """The reduced ODE on the invariant manifold in `(m, q, n, s, b)`
    (`docs/ode.md#derivation-of-the-odes`), with the value fields and the label noise integrated
    out analytically.

    With `e²(χ) = E[(ŷ−y)²|keys]` ([`headflow.dynamics.Model.conditional_error`][]) and
    `Ĝ = ∂(½e²)/∂χ` (autodiff), per head h, feature f:

    - `dm/dt = −η E[Σ_ℓ Ĝ_ℓ χ*_ℓᵀ] − ηλ m`
    - `dq/dt = −η E[Σ_ℓ (Ĝ_ℓ χ_ℓᵀ + χ_ℓ Ĝ_ℓᵀ)] + (η²/B) E[e² Jᵀ(s⊗I)J + 2 Ĝ Ĝᵀ]_{diag ℓ} − 2ηλ q`
    - `dn/dt = η(ρ* a − C n) − ηλ n`, `a = E A_{·1}`, `C = E Σ_ℓ A_ℓ A_ℓᵀ`
    - `ds/dt = η(a nᵀ + n aᵀ − C s − s C) + (η²/B) E[e² Σ_ℓ A_ℓ A_ℓᵀ] − 2ηλ s`
    - `db/dt = −η_b E[∂(½e²)/∂b]`

    where `J = ∂A/∂χ` and the noise term of q is Isserlis' theorem for the product of the two
    Gaussian factors `(ŷ − y)` and `Σ z J` of `G^χ`.
    """

    model: AttentionBase
    steps: StepSizes
    nodes: AbstractNodes
    sgd_noise: bool = eqx.field(static=True, default=True)
    batch: int = eqx.field(static=True, default=1)
    chunk: ClassVar[int] = 2048
    manifold_form: ClassVar[bool] = True

    @classmethod
    def build(cls, model: AttentionBase, steps: StepSizes, backend: AbstractExpectation, *,
              sgd_noise: bool = True, max_group: int = MAX_GROUP) -> ManifoldField:
        """The field with `backend`'s nodes over the key fields, closed under the head
        permutations (all of them while `H! ≤ max_group`, else the cyclic shifts)."""
        return cls(model=model, steps=steps, nodes=key_nodes(model, backend,
                                                             max_group=max_group),
                   sgd_noise=sgd_noise)

    def node_derivative(self, ov: Overlaps, x: Float[Array, " d"]) -> Overlaps:
        model, hp = self.model, self.steps
        law = FieldLaw.from_overlaps(ov, model.rho, manifold=True)
        vm = ValueMoments(mz=jnp.zeros((model.H, model.L)), my=jnp.zeros(()), szz=ov.s,
                          szy=ov.n, syy=jnp.asarray(model.rho, ov.s.dtype))
        tn, g_star, g_perp = split_key_normals(model, x)

        def half_e2(chi, b):
            return 0.5 * model.conditional_error(chi, b, vm)

        def at(theta):
            chi_star, chi = law.key_fields(theta, g_star, g_perp)
            h, (g_chi, g_b) = jax.value_and_grad(half_e2, argnums=(0, 1))(chi, ov.b)
            A = model.attention(chi, ov.b)
            out = {"Tm": outer_sum(g_chi, chi_star), "Tq": outer_sum(g_chi, chi),
                   "a": A[:, SIGNAL], "C": outer_sum(A, A), "gb": g_b}
            if self.sgd_noise:
                e2 = 2.0 * h
                J = jax.jacrev(model.attention)(chi, ov.b)          # J[a, p, h, l]
                # M_hk = Σ_{l,p,a,b} J[a,p,h,l] s_ab J[b,p,k,l], as broadcasts (tiny matrices
                # inside vmap: elementwise code is much faster than batched matmuls on CPU)
                sJ = jnp.sum(ov.s[:, :, None, None, None] * J[None], axis=1)
                M = jnp.sum(sJ[:, :, :, None, :] * J[:, :, None, :, :], axis=(0, 1, 4))
                out["Nk"] = e2 * M + 2.0 * outer_sum(g_chi, g_chi)
                out["Nv"] = e2 * out["C"]
            return out

        E = over_theta(model, tn, g_star, at)
        eta, lam = hp.lr, hp.weight_decay
        dm = -eta * E["Tm"] - eta * lam * ov.m
        dq = -eta * (E["Tq"] + E["Tq"].T) - 2 * eta * lam * ov.q
        dn = eta * (model.rho * E["a"] - E["C"] @ ov.n) - eta * lam * ov.n
        a_n = jnp.outer(E["a"], ov.n)
        ds = eta * (a_n + a_n.T - E["C"] @ ov.s - ov.s @ E["C"]) - 2 * eta * lam * ov.s
        if self.sgd_noise:
            dq = dq + eta**2 / hp.batch * E["Nk"]
            ds = ds + eta**2 / hp.batch * E["Nv"]
        if not model.train_values:
            dn, ds = jnp.zeros_like(dn), jnp.zeros_like(ds)
        db = -hp.lr_bias * E["gb"]
        return eqx.tree_at(lambda o: (o.m, o.q, o.n, o.s, o.b), zeros_like(ov),
                           (dm, dq, dn, ds, db))
