"""Order-parameter vector fields (spec §6): the generic local-field form and the reduced form on
the invariant manifold.

Both are averages over Gaussian nodes of a *per-node derivative*: every term of the ODE is affine
in expectations, so the mean of the per-node derivatives is the right-hand side and their spread
gives its error estimate. The loss derivatives are taken by autodiff of [`dynamics.Model`][]'s
predictor code, the same code the simulator runs.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._model import SIGNAL, Model, ValueMoments
from .._overlaps import FieldLaw, Overlaps
from .._risk import key_dims, over_theta, split_key_normals
from ..expectations import AbstractExpectation, Nodes
from ._symmetry import exchangeable_nodes


class Hyper(eqx.Module):
    """SGD step sizes as they enter the ODE: `η`, `η_b`, weight decay `λ`, batch `B`, and
    whether the `η²` (SGD-noise) terms are kept (False: gradient flow)."""

    lr: float
    lr_bias: float
    weight_decay: float = 0.0
    batch: int = 1
    sgd_noise: bool = eqx.field(static=True, default=True)

    @classmethod
    def from_config(cls, cfg) -> Hyper:
        tr = cfg.training
        return cls(lr=tr.lr, lr_bias=tr.lr_bias, weight_decay=tr.weight_decay,
                   batch=tr.batch, sgd_noise=cfg.ode.sgd_noise)


class AbstractField(eqx.Module):
    """`d(overlaps)/dt` as an average over fixed Gaussian nodes (a smooth function of the state:
    common random numbers). Call as a diffrax vector field `field(t, ov, args)`."""

    model: Model
    hyper: Hyper
    nodes: Nodes

    def node_derivative(self, ov: Overlaps, x: Float[Array, " d"]) -> Overlaps:
        raise NotImplementedError

    chunk: int = eqx.field(static=True, default=2048)

    def per_node(self, ov: Overlaps) -> Overlaps:
        return jax.vmap(lambda x: self.node_derivative(ov, x))(self.nodes.x)

    def __call__(self, t, ov: Overlaps, args=None) -> Overlaps:
        # Weighted sum over the nodes in chunks: keeps the per-node intermediates in cache
        # (2-3x faster on CPU than one vmap over all nodes) without changing the result.
        x, w = self.nodes.x, self.nodes.w
        n = x.shape[0]
        c = min(self.chunk, n)
        pad = (-n) % c
        if pad:
            x = jnp.concatenate([x, jnp.zeros((pad, x.shape[1]), x.dtype)])
            w = jnp.concatenate([w, jnp.zeros(pad, w.dtype)])

        def body(acc, xw):
            xs, ws = xw
            per = jax.vmap(lambda xi: self.node_derivative(ov, xi))(xs)
            return jax.tree.map(lambda a, p: a + jnp.tensordot(ws, p, axes=1), acc, per), None

        zero = jax.tree.map(jnp.zeros_like, ov)
        acc, _ = jax.lax.scan(body, zero, (x.reshape(-1, c, x.shape[1]), w.reshape(-1, c)))
        return acc

    def with_error(self, ov: Overlaps, backend: AbstractExpectation) -> tuple[Overlaps, Overlaps]:
        """`(RHS, its error estimate)` leafwise, with `backend`'s error rule."""
        return backend.estimate(lambda xs: jax.vmap(lambda x: self.node_derivative(ov, x))(xs),
                                self.nodes)


def _g_perp_block(model: Model) -> tuple[int, int]:
    """Where the per-head normals `g⊥` sit in a node (see `split_key_normals`)."""
    return model.prior.n_normal_dims + model.L * model.F, model.H


def _outer_sum(a: Float[Array, "i L"], b: Float[Array, "j L"]) -> Float[Array, "i j"]:
    """`Σ_ℓ a_{iℓ} b_{jℓ}` as a broadcast sum (fast under vmap on CPU)."""
    return jnp.sum(a[:, None, :] * b[None, :, :], axis=-1)


def _zeros_like(ov: Overlaps) -> Overlaps:
    return jax.tree.map(jnp.zeros_like, ov)


class ManifoldField(AbstractField):
    """The reduced ODE on the invariant manifold in `(m, q, n, s, b)` (spec §4, §6), with the
    value fields and the label noise integrated out analytically.

    With `e²(χ) = E[(ŷ−y)²|keys]` ([`dynamics.Model.conditional_error`][]) and
    `Ĝ = ∂(½e²)/∂χ` (autodiff), per head h, feature f:

    - `dm/dt = −η E[Σ_ℓ Ĝ_ℓ χ*_ℓᵀ] − ηλ m`
    - `dq/dt = −η E[Σ_ℓ (Ĝ_ℓ χ_ℓᵀ + χ_ℓ Ĝ_ℓᵀ)] + (η²/B) E[e² Jᵀ(s⊗I)J + 2 Ĝ Ĝᵀ]_{diag ℓ} − 2ηλ q`
    - `dn/dt = η(ρ* a − C n) − ηλ n`, `a = E A_{·1}`, `C = E Σ_ℓ A_ℓ A_ℓᵀ`
    - `ds/dt = η(a nᵀ + n aᵀ − C s − s C) + (η²/B) E[e² Σ_ℓ A_ℓ A_ℓᵀ] − 2ηλ s`
    - `db/dt = −η_b E[∂(½e²)/∂b]`

    where `J = ∂A/∂χ` and the noise term of q is Isserlis' theorem for the product of the two
    Gaussian factors `(ŷ − y)` and `Σ z J` of `G^χ`. Derivation: `docs/ode.md`.
    """

    @classmethod
    def build(cls, model: Model, hyper: Hyper, backend: AbstractExpectation) -> ManifoldField:
        return cls(model=model, hyper=hyper, nodes=exchangeable_nodes(
            backend, key_dims(model), model.H, model.L, [_g_perp_block(model)]))

    def node_derivative(self, ov: Overlaps, x: Float[Array, " d"]) -> Overlaps:
        model, hp = self.model, self.hyper
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
            out = {"Tm": _outer_sum(g_chi, chi_star), "Tq": _outer_sum(g_chi, chi),
                   "a": A[:, SIGNAL], "C": _outer_sum(A, A), "gb": g_b}
            if hp.sgd_noise:
                e2 = 2.0 * h
                J = jax.jacrev(model.attention)(chi, ov.b)          # J[a, p, h, l]
                # M_hk = Σ_{l,p,a,b} J[a,p,h,l] s_ab J[b,p,k,l], as broadcasts (tiny matrices
                # inside vmap: elementwise code is much faster than batched matmuls on CPU)
                sJ = jnp.sum(ov.s[:, :, None, None, None] * J[None], axis=1)
                M = jnp.sum(sJ[:, :, :, None, :] * J[:, :, None, :, :], axis=(0, 1, 4))
                out["Nk"] = e2 * M + 2.0 * _outer_sum(g_chi, g_chi)
                out["Nv"] = e2 * out["C"]
            return out

        E = over_theta(model, tn, at)
        eta, lam = hp.lr, hp.weight_decay
        dm = -eta * E["Tm"] - eta * lam * ov.m
        dq = -eta * (E["Tq"] + E["Tq"].T) - 2 * eta * lam * ov.q
        dn = eta * (model.rho * E["a"] - E["C"] @ ov.n) - eta * lam * ov.n
        a_n = jnp.outer(E["a"], ov.n)
        ds = eta * (a_n + a_n.T - E["C"] @ ov.s - ov.s @ E["C"]) - 2 * eta * lam * ov.s
        if hp.sgd_noise:
            dq = dq + eta**2 / hp.batch * E["Nk"]
            ds = ds + eta**2 / hp.batch * E["Nv"]
        if not model.train_values:
            dn, ds = jnp.zeros_like(dn), jnp.zeros_like(ds)
        db = -hp.lr_bias * E["gb"]
        zero = _zeros_like(ov)
        return eqx.tree_at(lambda o: (o.m, o.q, o.n, o.s, o.b), zero, (dm, dq, dn, ds, db))


def full_dims(model: Model) -> int:
    """Gaussian dimensions of one draw of all fields: θ, `g*`, `g⊥`, `g^ν` per token, and ξ."""
    return key_dims(model) + model.L * (model.H + 1) + 1


class FullField(AbstractField):
    """The generic local-field ODE (spec §6) on the full Gram matrix, cross overlaps included:
    with `G_{iℓ} = ∂ℓ/∂λ_{iℓ}` for the student rows `i ∈ {K, V}` (autodiff of
    [`dynamics.Model.loss`][]),

    - `dΩ_{ij*}/dt = −η E[Σ_ℓ G_{iℓ} λ_{j*ℓ}] − ηλ Ω_{ij*}`
    - `dΩ_{ij}/dt = −η E[Σ_ℓ (G_{iℓ} λ_{jℓ} + G_{jℓ} λ_{iℓ})] + (η²/B) E[Σ_ℓ G_{iℓ} G_{jℓ}] − 2ηλ Ω_{ij}`
    - `db_h/dt = −η_b E[∂ℓ/∂b_h]`

    with every field (values and label noise included) sampled."""

    @classmethod
    def build(cls, model: Model, hyper: Hyper, backend: AbstractExpectation) -> FullField:
        blocks = [_g_perp_block(model), (key_dims(model), model.H + 1)]
        return cls(model=model, hyper=hyper, nodes=exchangeable_nodes(
            backend, full_dims(model), model.H, model.L, blocks))

    def node_derivative(self, ov: Overlaps, x: Float[Array, " d"]) -> Overlaps:
        model, hp = self.model, self.hyper
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
            out = {"TST": _outer_sum(G, lam_t), "TSS": _outer_sum(G, lam_s), "gb": g_b}
            if hp.sgd_noise:
                out["N"] = _outer_sum(G, G)
            return out

        E = over_theta(model, tn, at)
        eta, lam = hp.lr, hp.weight_decay
        omega = ov.gram(model.rho)
        st = omega[:2 * H, 2 * H:]
        ss = omega[:2 * H, :2 * H]
        d_st = -eta * E["TST"] - eta * lam * st
        d_ss = -eta * (E["TSS"] + E["TSS"].T) - 2 * eta * lam * ss
        if hp.sgd_noise:
            d_ss = d_ss + eta**2 / hp.batch * E["N"]
        if not model.train_values:
            frozen = jnp.arange(2 * H) >= H
            d_st = jnp.where(frozen[:, None], 0.0, d_st)
            d_ss = jnp.where(frozen[:, None] | frozen[None, :], 0.0, d_ss)
        F = model.F
        rows = jnp.concatenate([d_ss, d_st], axis=1)                 # (2H, 2H + F + 1)
        d = Overlaps.from_student_rows(rows, -hp.lr_bias * E["gb"], F)
        return d
