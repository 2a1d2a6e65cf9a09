"""Head-difference perturbations of the manifold coordinates (`docs/phases.md`)."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float

from .._errors import HeadflowError
from .._model import AttentionBase
from .._overlaps import Overlaps
from ..measures import alignment
from ._symmetric import flatten, head_average, unflatten


def helmert(H: int) -> np.ndarray:
    """An orthonormal basis `(H−1, H)` of the vectors orthogonal to `1` (head contrasts)."""
    rows = []
    for i in range(1, H):
        w = np.zeros(H)
        w[:i] = 1.0
        w[i] = -float(i)
        rows.append(w / np.sqrt(i * (i + 1)))
    return np.asarray(rows).reshape(H - 1, H)


def bias_is_inert(model: AttentionBase) -> bool:
    """True when the activation ignores the bias (softmax): then `b` never moves and is left
    out of the perturbations."""
    chi = jr.normal(jr.key(0), (model.H, model.L), dtype=jnp.float64)
    b = jnp.linspace(-1.0, 1.0, model.H)
    return bool(jnp.allclose(model.attention(chi, b), model.attention(chi, 0.0 * b),
                             rtol=0, atol=1e-14))


class HeadModes(eqx.Module):
    """Bases of the perturbations of the manifold coordinates ([`flatten`][]).

    - `standard (H−1, N, μ)`: for each Helmert contrast `w` ([`helmert`][]), the orthonormal
      columns `δm_{·f} = w` (f = 1..F), `δq = diag w`, `δq_{hh'} = w_h + w_{h'}` (h ≠ h', H ≥ 3),
      `δn = w`, `δs` (same two patterns), `δb = w`; frozen values (`train_values = false`) and an
      inert bias (softmax) are left out. By Schur's lemma an equivariant field's Jacobian maps
      each `w`-block to itself with the same matrix `B`.
    - `differences (N, k)`: an orthonormal basis of all head-difference perturbations (the
      complement of the symmetric subspace among symmetric `q, s`), same exclusions.
    - `labels`: the names of the μ columns.
    """

    standard: Float[Array, "Hm1 N mu"]
    differences: Float[Array, "N k"]
    labels: tuple[str, ...] = eqx.field(static=True)
    H: int = eqx.field(static=True)
    F: int = eqx.field(static=True)

    @classmethod
    def build(cls, model: AttentionBase) -> HeadModes:
        H, F = model.H, model.F
        if H < 2:
            raise HeadflowError("head-difference perturbations need at least 2 heads "
                                f"(model.H = {H})")
        values = model.train_values
        bias = not bias_is_inert(model)
        N = H * F + 2 * H * H + 2 * H
        blocks = []
        labels: list[str] = []
        for k, w in enumerate(helmert(H)):
            cols = []
            off = np.add.outer(w, w) * (1.0 - np.eye(H))
            pats = [(f"m_{f + 1}", "m", np.outer(w, np.eye(F)[f])) for f in range(F)]
            pats += [("q_diag", "q", np.diag(w))]
            if H >= 3:
                pats += [("q_off", "q", off)]
            if values:
                pats += [("n", "n", w), ("s_diag", "s", np.diag(w))]
                if H >= 3:
                    pats += [("s_off", "s", off)]
            if bias:
                pats += [("b", "b", w)]
            for name, block, pat in pats:
                parts = {"m": np.zeros((H, F)), "q": np.zeros((H, H)), "n": np.zeros(H),
                         "s": np.zeros((H, H)), "b": np.zeros(H)}
                parts[block] = pat
                v = np.concatenate([parts[x].ravel() for x in "mqnsb"])
                cols.append(v / np.linalg.norm(v))
                if k == 0:
                    labels.append(name)
            blocks.append(np.stack(cols, axis=1))
        standard = np.stack(blocks)                                     # (H−1, N, μ)
        differences = _difference_basis(H, F, values=values, bias=bias)
        assert differences.shape[0] == N
        return cls(standard=jnp.asarray(standard), differences=jnp.asarray(differences),
                   labels=tuple(labels), H=H, F=F)

    @property
    def mu(self) -> int:
        return self.standard.shape[-1]

    def flatten(self, ov: Overlaps) -> Float[Array, " N"]:
        """[`flatten`][] (the coordinates of the bases)."""
        return flatten(ov)

    def unflatten(self, vec: Float[Array, " N"]) -> Overlaps:
        """[`unflatten`][] at this model's `H`, `F`."""
        return unflatten(vec, self.H, self.F)

    def average(self, ov: Overlaps) -> Overlaps:
        """[`head_average`][]: the projection on the symmetric subspace."""
        return head_average(ov)

    def alignment(self, ov: Overlaps) -> Float[Array, "H F"]:
        """`α_hf = m_hf/√q_hh`, whose spread over heads defines the escape."""
        return alignment(ov.m, ov.q)

    def tangent(self, coef: Float[Array, "Hm1 mu"]) -> Overlaps:
        """The perturbation `Σ_k U_k coef_k` as overlaps."""
        return unflatten(jnp.einsum("knj,kj->n", self.standard, coef), self.H, self.F)


def _difference_basis(H: int, F: int, *, values: bool, bias: bool) -> np.ndarray:
    """Orthonormal basis of `range(P_T − P_sym P_T)` restricted to the active coordinates."""
    N = H * F + 2 * H * H + 2 * H

    def apply(fn):
        return np.stack([np.asarray(fn(np.eye(N)[i])) for i in range(N)], axis=1)

    def sym_qs(v):
        o = unflatten(jnp.asarray(v), H, F)
        return flatten(Overlaps.manifold(o.m, 0.5 * (o.q + o.q.T), o.n, 0.5 * (o.s + o.s.T),
                                         o.b))

    def active(v):
        o = unflatten(jnp.asarray(v), H, F)
        z = jnp.zeros_like
        return flatten(Overlaps.manifold(o.m, o.q, o.n if values else z(o.n),
                                         o.s if values else z(o.s), o.b if bias else z(o.b)))

    PT = apply(sym_qs) @ apply(active)
    PS = apply(lambda v: flatten(head_average(unflatten(jnp.asarray(v), H, F)))) @ PT
    P = PT - PS
    lam, U = np.linalg.eigh(0.5 * (P + P.T))
    return U[:, lam > 0.5]
