"""A plain numpy implementation of the reduced (manifold) ODE right-hand side, for the
benchmark against the JAX engine (`bench_ode.py`). Closed-form activation Jacobians, vectorized
over nodes and support points with numpy broadcasting; discrete priors only.
"""

from __future__ import annotations

import numpy as np


def _sqrtm_psd(a):
    lam, u = np.linalg.eigh(0.5 * (a + a.T))
    return (u * np.sqrt(np.clip(lam, 0, None))) @ u.T


class NumpyManifoldRHS:
    """`f(t, y)` for `scipy.integrate.solve_ivp`, y = flattened (m, q, n, s, b)."""

    def __init__(self, *, activation, L, H, F, points, weights, noise, rho, lr, lr_bias,
                 weight_decay, batch, sgd_noise, nodes):
        self.act, self.L, self.H, self.F = activation, L, H, F
        self.points, self.weights = np.asarray(points), np.asarray(weights)
        self.noise, self.rho = noise, rho
        self.lr, self.lr_bias, self.wd, self.batch = lr, lr_bias, weight_decay, batch
        self.sgd_noise = sgd_noise
        x = np.asarray(nodes)
        n = x.shape[0]
        self.g_star = x[:, :L * F].reshape(n, F, L)
        self.g_perp = x[:, L * F:L * (F + H)].reshape(n, H, L)
        self.n_nodes = n
        self.sizes = [H * F, H * H, H, H * H, H]

    def unpack(self, y):
        H, F = self.H, self.F
        parts = np.split(y, np.cumsum(self.sizes)[:-1])
        return (parts[0].reshape(H, F), parts[1].reshape(H, H), parts[2],
                parts[3].reshape(H, H), parts[4])

    def attention(self, u):
        if self.act == "bayes_softmax":
            top = u.max(axis=(-2, -1), keepdims=True)
            e = np.exp(u - top)
            return e / e.sum(axis=(-2, -1), keepdims=True)
        top = u.max(axis=-1, keepdims=True)
        if self.act == "softmax1":
            top = np.maximum(top, 0.0)
            e = np.exp(u - top)
            return e / (np.exp(-top) + e.sum(axis=-1, keepdims=True))
        e = np.exp(u - top)
        return e / e.sum(axis=-1, keepdims=True)

    def jacobian(self, A):
        """J[..., a, p, h, l] = ∂A_ap/∂χ_hl."""
        H, L = self.H, self.L
        eye_h, eye_l = np.eye(H), np.eye(L)
        diag = A[..., :, :, None, None] * eye_h[:, None, :, None] * eye_l[None, :, None, :]
        if self.act == "bayes_softmax":
            return diag - A[..., :, :, None, None] * A[..., None, None, :, :]
        return diag - (A[..., :, :, None, None] * eye_h[:, None, :, None]
                       * A[..., None, None, :, :])

    def __call__(self, t, y):
        m, q, n, s, b = self.unpack(y)
        L = self.L
        r_half = _sqrtm_psd(q - m @ m.T)
        signal = np.zeros(L)
        signal[0] = 1.0
        chi_star = (self.g_star[None] + self.points[:, None, :, None] * signal)  # (S,n,F,L)
        chi = (np.einsum("hf,snfl->snhl", m, chi_star)
               + np.einsum("hk,nkl->nhl", r_half, self.g_perp)[None])
        A = self.attention(chi + b[:, None])
        sA = np.einsum("hk,snkl->snhl", s, A)
        e2 = (np.einsum("snhl,snhl->sn", A, sA) - 2 * A[..., 0] @ n + self.rho
              + self.noise**2)
        gA = sA.copy()
        gA[..., 0] -= n
        if self.act == "bayes_softmax":
            G = A * (gA - np.einsum("snhl,snhl->sn", A, gA)[..., None, None])
        else:
            G = A * (gA - np.einsum("snhl,snhl->snh", A, gA)[..., None])
        w = np.broadcast_to(self.weights[:, None] / self.n_nodes, A.shape[:2])  # (S, n)
        E = lambda v: np.tensordot(w, v, axes=([0, 1], [0, 1]))  # noqa: E731
        Tm = E(np.einsum("snhl,snfl->snhf", G, chi_star))
        Tq = E(np.einsum("snhl,snkl->snhk", G, chi))
        a = E(A[..., 0])
        C = E(np.einsum("snhl,snkl->snhk", A, A))
        gb = E(G.sum(-1))
        eta, lam = self.lr, self.wd
        dm = -eta * Tm - eta * lam * m
        dq = -eta * (Tq + Tq.T) - 2 * eta * lam * q
        dn = eta * (self.rho * a - C @ n) - eta * lam * n
        an = np.outer(a, n)
        ds = eta * (an + an.T - C @ s - s @ C) - 2 * eta * lam * s
        if self.sgd_noise:
            J = self.jacobian(A)
            M = np.einsum("snaphl,ab,snbpkl->snhk", J, s, J, optimize=True)
            Nk = E(e2[..., None, None] * M + 2 * np.einsum("snhl,snkl->snhk", G, G))
            Nv = E(e2[..., None, None] * np.einsum("snhl,snkl->snhk", A, A))
            dq = dq + eta**2 / self.batch * Nk
            ds = ds + eta**2 / self.batch * Nv
        db = -self.lr_bias * gb
        return np.concatenate([dm.ravel(), dq.ravel(), dn, ds.ravel(), db])
