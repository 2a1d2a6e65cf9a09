"""A lean closed-form integration of the committee machine's ODEs (Saad & Solla 1995, in the
conventions of Goldt et al. 2019), for `bench_committee.py`: the erf integrals written out in
numpy, vectorized over all index combinations, driven by `scipy.integrate.solve_ivp`. It shares
no code with headflow (the baseline the benchmark measures against).

Run as a script it integrates one trajectory from a start stored in an `.npz` (`Q`, `R`, `T`,
`v`, `A`) and prints the final `ε_g`, as a user of such a baseline would; with several `--lr`
and `--noise` values it integrates every pair, one after the other, and writes the final `ε_g`
(row-major over η, then σ) to `--out`:

    python benchmarks/_scipy_committee.py START.npz --lr 0.5 --noise 0.1 --t-max 1000
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from scipy.integrate import solve_ivp

_2PI = 2.0 / np.pi


def _i2(C):
    d = 1.0 + np.diagonal(C)
    return _2PI * np.arcsin(C / np.sqrt(np.outer(d, d)))


def erf_ode(K: int, T: np.ndarray, A: np.ndarray, lr: float, noise: float):
    """`f(t, y)` of the first-layer ODEs (second layer fixed at `v`), y = (Q.ravel(), R.ravel()),
    and the risk `ε_g(y)`; `g(x) = erf(x/√2)`."""
    M = T.shape[0]
    N = K + M

    def unpack(y, v):
        Q = y[:K * K].reshape(K, K)
        R = y[K * K:].reshape(K, M)
        C = np.empty((N, N))
        C[:K, :K], C[:K, K:], C[K:, :K], C[K:, K:] = Q, R, R.T, T
        return Q, R, C, np.concatenate([v, -A])

    def rhs(v):
        def f(t, y):
            Q, R, C, w = unpack(y, v)
            dg = 1.0 + np.diagonal(C)
            # I3(i, b, c) = E[g'(λ_i) λ_b g(λ_c)], i student, b, c any
            Ci = C[:K]                                                       # (K, N)
            a = dg[:K, None, None]
            num = C[None, :, :] * a - Ci[:, :, None] * Ci[:, None, :]        # (K, N, N)
            den = a * np.sqrt(a * dg[None, None, :] - Ci[:, None, :] ** 2)
            I3 = _2PI * num / den
            # I4(i, k, c, d) = E[g'(λ_i) g'(λ_k) g(λ_c) g(λ_d)], i, k students
            Cik = C[:K, :K][:, :, None, None]
            ai = dg[:K, None, None, None]
            ak = dg[None, :K, None, None]
            cic = Ci[:, None, :, None]
            cid = Ci[:, None, None, :]
            ckc = Ci[None, :, :, None]
            ckd = Ci[None, :, None, :]
            L4 = ai * ak - Cik ** 2
            L0 = (L4 * C[None, None] - ckc * ckd * ai - cic * cid * ak
                  + Cik * cic * ckd + Cik * cid * ckc)
            L1 = L4 * dg[None, None, :, None] - ckc ** 2 * ai - cic ** 2 * ak + 2 * Cik * cic * ckc
            L2 = L4 * dg[None, None, None, :] - ckd ** 2 * ai - cid ** 2 * ak + 2 * Cik * cid * ckd
            I4 = (_2PI ** 2) * np.arcsin(L0 / np.sqrt(L1 * L2)) / np.sqrt(L4)
            J2 = _2PI / np.sqrt(dg[:K, None] * dg[None, :K] - C[:K, :K] ** 2)
            g3 = np.einsum("ibc,c->ib", I3, w)                               # (K, N)
            dR = -lr * v[:, None] * g3[:, K:]
            lin = -lr * v[:, None] * g3[:, :K]
            quad = np.einsum("ikcd,c,d->ik", I4, w, w) + noise ** 2 * J2
            dQ = lin + lin.T + lr ** 2 * np.outer(v, v) * quad
            return np.concatenate([dQ.ravel(), dR.ravel()])
        return f

    def risk(y, v):
        _, _, C, w = unpack(y, v)
        return 0.5 * w @ _i2(C) @ w

    return rhs, risk


def integrate(Q0, R0, T, v, A, *, lr: float, noise: float, t_max: float, rtol: float,
              atol: float, method: str = "RK45") -> tuple[float, int]:
    """Final `ε_g` and the number of right-hand-side evaluations of one run."""
    K = Q0.shape[0]
    rhs, risk = erf_ode(K, T, A, lr, noise)
    y0 = np.concatenate([Q0.ravel(), R0.ravel()])
    sol = solve_ivp(rhs(v), (0.0, t_max), y0, method=method, rtol=rtol, atol=atol,
                    t_eval=[t_max])
    if not sol.success:
        raise RuntimeError(sol.message)
    return float(risk(sol.y[:, -1], v)), int(sol.nfev)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("start")
    p.add_argument("--lr", type=float, nargs="+", required=True)
    p.add_argument("--noise", type=float, nargs="+", default=[0.0])
    p.add_argument("--out", default=None)
    p.add_argument("--t-max", type=float, default=1000.0)
    p.add_argument("--rtol", type=float, default=1e-6)
    p.add_argument("--atol", type=float, default=1e-8)
    a = p.parse_args(argv)
    z = np.load(a.start)
    eps = []
    for lr in a.lr:
        for noise in a.noise:
            e, nfev = integrate(z["Q"], z["R"], z["T"], z["v"], z["A"], lr=lr, noise=noise,
                                t_max=a.t_max, rtol=a.rtol, atol=a.atol)
            print(f"lr={lr} noise={noise} eps_g={e!r} nfev={nfev}")
            eps.append(e)
    if a.out:
        np.savez(a.out, eps=np.asarray(eps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
