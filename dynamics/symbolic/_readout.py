"""The ODEs of readout models, derived symbolically (`docs/equations.md#readout-models`): the
committee machine, and any model whose student and teacher are readouts `Σ_a c_a g(λ_a)` of one
unit activation under the squared loss.

From the predictor, sympy derives the per-sample increments of `Q`, `R` and the readout `c`
(`headflow.dynamics.models.sample_increment`: `U_Q = −η(G λᵀ + λ Gᵀ) + η² G Gᵀ`, `U_R = −η G λ*ᵀ`,
`U_c = −η_c ∂ℓ/∂c`, with `G = ∂ℓ/∂λ`), expands them into monomials of `g`, `g'`, the fields
and the label noise `ζ`, and takes the expectation of each monomial: `ζ` is independent of the
fields (`E ζ = 0`, `E ζ² = 1`), and each product of unit factors is one of the Gaussian integrals
`I2, I3, I4, J2` of the unit ([`headflow.dynamics.units.AbstractUnit`][]). [`readout_rhs`][]
evaluates the derived system with the unit's closed forms.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from typing import Any

import jax.numpy as jnp
import numpy as np
import sympy as sp

from ..models._base import GramState, ModelBase

I2, I3, I4, J2 = (sp.Function(n) for n in ("I2", "I3", "I4", "J2"))
"""The Gaussian integrals, applied to unit numbers 1…K (students), K+1…K+M (teachers):
`I2(a,b) = E[g(a)g(b)]`, `I3(a,b,c) = E[g'(a) λ_b g(c)]`, `I4(a,b,c,d) = E[g'(a)g'(b)g(c)g(d)]`,
`J2(a,b) = E[g'(a)g'(b)]`."""


@dataclasses.dataclass(frozen=True)
class ReadoutODE:
    """The derived system for K students and M teachers: `dQ[i][k]`, `dR[i][n]`, `dc[i]`
    (sympy expressions in the integrals, the readouts `c`, `cs`, `σ`, `η`, `η_c`)."""

    K: int
    M: int
    dQ: tuple[tuple[sp.Expr, ...], ...]
    dR: tuple[tuple[sp.Expr, ...], ...]
    dc: tuple[sp.Expr, ...]
    symbols: dict


def _integral(factors: list[tuple[str, int]]) -> sp.Expr:
    """The expectation of a product of unit factors `(kind, unit)`, kind in `g`, `dg`, `id`."""
    kinds = Counter(k for k, _ in factors)
    by = {k: sorted(u for kk, u in factors if kk == k) for k in kinds}
    if not factors:
        return sp.Integer(1)
    if kinds == Counter({"g": 2}):
        return I2(*by["g"])
    if kinds == Counter({"dg": 2}):
        return J2(*by["dg"])
    if kinds == Counter({"dg": 1, "id": 1, "g": 1}):
        return I3(by["dg"][0], by["id"][0], by["g"][0])
    if kinds == Counter({"dg": 2, "g": 2}):
        return I4(*by["dg"], *by["g"])
    raise ValueError(f"no Gaussian integral of the unit for the monomial {factors}")


def expectation(expr: sp.Expr, lam: tuple, zeta: sp.Symbol, g: Any) -> sp.Expr:
    """`E[expr]` over the Gaussian fields `lam` and the independent label noise `zeta`, for an
    expression polynomial in `g(λ)`, `g'(λ)`, `λ` and `ζ`."""
    unit = {s: i + 1 for i, s in enumerate(lam)}
    out = sp.Integer(0)
    for term in sp.Add.make_args(sp.expand(expr)):
        coef, factors, z = sp.Integer(1), [], 0
        for f in sp.Mul.make_args(term):
            base, power = f.as_base_exp()
            if base == zeta:
                z += int(power)
            elif isinstance(base, sp.Derivative) and base.expr.func == g:
                factors += [("dg", unit[base.expr.args[0]])] * int(power)
            elif getattr(base, "func", None) == g:
                factors += [("g", unit[base.args[0]])] * int(power)
            elif base in unit:
                factors += [("id", unit[base])] * int(power)
            else:
                coef *= f
        moment = 0 if z % 2 else sp.factorial2(z - 1) if z else 1
        if moment:
            out += coef * moment * _integral(factors)
    return out


@functools.lru_cache(maxsize=16)
def readout_ode(K: int, M: int) -> ReadoutODE:
    """Derive the ODE of a readout model with K students and M teachers."""
    P = K + M
    lam = sp.symbols(f"lambda_1:{P + 1}", real=True)
    c = sp.symbols(f"c_1:{K + 1}", real=True)
    cs = sp.symbols(f"c^*_1:{M + 1}", real=True)
    sigma, zeta, eta, eta_c = sp.symbols("sigma zeta eta eta_c", real=True)
    g = sp.Function("g")
    phi = sum(c[i] * g(lam[i]) for i in range(K))
    y = sum(cs[n] * g(lam[K + n]) for n in range(M)) + sigma * zeta
    loss = (phi - y) ** 2 / 2
    G = [sp.diff(loss, lam[i]) for i in range(K)]
    E = functools.partial(expectation, lam=lam, zeta=zeta, g=g)
    dQ = tuple(tuple(sp.expand(E(-eta * (G[i] * lam[k] + G[k] * lam[i]) + eta**2 * G[i] * G[k]))
                     for k in range(K)) for i in range(K))
    dR = tuple(tuple(sp.expand(E(-eta * G[i] * lam[K + n])) for n in range(M))
               for i in range(K))
    dc = tuple(sp.expand(E(-eta_c * sp.diff(loss, c[i]))) for i in range(K))
    syms = {"c": c, "cs": cs, "sigma": sigma, "eta": eta, "eta_c": eta_c}
    return ReadoutODE(K=K, M=M, dQ=dQ, dR=dR, dc=dc, symbols=syms)


@functools.lru_cache(maxsize=16)
def _compiled(K: int, M: int):
    ode = readout_ode(K, M)
    exprs = [e for row in ode.dQ for e in row] + [e for row in ode.dR for e in row] + list(ode.dc)
    atoms = sorted({a for e in exprs for a in e.atoms(sp.Function)
                    if a.func in (I2, I3, I4, J2)}, key=sp.default_sort_key)
    x = sp.symbols(f"x_0:{len(atoms)}")
    subs = dict(zip(atoms, x))
    s = ode.symbols
    fn = sp.lambdify([list(s["c"]), list(s["cs"]), s["sigma"], s["eta"], s["eta_c"], list(x)],
                     [e.xreplace(subs) for e in exprs], modules="jax")
    kinds = {I2: "i2", I3: "i3", I4: "i4", J2: "j2"}
    table: dict[str, list[tuple[int, tuple[int, ...]]]] = {}
    for j, a in enumerate(atoms):
        table.setdefault(kinds[a.func], []).append((j, tuple(int(u) - 1 for u in a.args)))
    return fn, table, len(atoms)


def readout_rhs(model: ModelBase, lr, lr_c, state: GramState) -> GramState:
    """The derived right-hand side at `state` (`lr` = η, `lr_c` = η_c the readout's step; no
    weight decay, batch 1), each integral from the unit's closed form: `dΩ` (teacher block 0)
    and `d params` (only the readout parameter, when trained)."""
    ro = model.readout(state.params)
    if ro is None:
        raise ValueError("readout_rhs needs a readout model")
    K, M = model.n_students, model.n_teachers
    fn, table, n = _compiled(K, M)
    vals = jnp.zeros(n, state.gram.dtype)
    for kind, entries in table.items():
        idx = np.array([e[1] for e in entries])
        sub = state.gram[idx[:, :, None], idx[:, None, :]]
        vals = vals.at[np.array([e[0] for e in entries])].set(getattr(ro.unit, kind)(sub))
    out = fn(list(ro.student), list(ro.teacher), model.noise, lr, lr_c, list(vals))
    dQ = jnp.stack(out[:K * K]).reshape(K, K)
    dR = jnp.stack(out[K * K:K * K + K * M]).reshape(K, M)
    dc = jnp.stack(out[K * K + K * M:])
    d = jnp.zeros_like(state.gram).at[:K, :K].set(dQ).at[:K, K:].set(dR).at[K:, :K].set(dR.T)
    params = {k: jnp.zeros_like(v) for k, v in state.params.items()}
    if ro.param is not None and ro.param in model.trained:
        params[ro.param] = dc
    return GramState(gram=d, params=params)


def readout_section(K: int = 2, M: int = 1) -> str:
    """The `docs/equations.md` section: the derived system for K students and M teachers."""
    ode = readout_ode(K, M)

    def eq(lhs: str, rhs: sp.Expr) -> str:
        return f"$$\n{lhs} = {sp.latex(rhs)}\n$$\n\n"

    out = ["## 9. Readout models: the committee machine\n\n"
           "For a student $\\hat y = \\sum_i c_i\\, g(\\lambda_i)$ and a teacher "
           "$y = \\sum_n c^*_n\\, g(\\lambda^*_n) + \\sigma\\zeta$ under the loss "
           "$\\frac12(\\hat y - y)^2$ (the committee machine: $c = v$, $c^* = A$), sympy "
           "differentiates the loss in the fields, forms the per-sample increments "
           "$U_{Q_{ik}} = -\\eta(G_i\\lambda_k + G_k\\lambda_i) + \\eta^2 G_i G_k$, "
           "$U_{R_{in}} = -\\eta G_i \\lambda^*_n$, $U_{c_i} = -\\eta_c\\,\\partial\\ell/"
           "\\partial c_i$, expands them into monomials and replaces each monomial by its "
           "Gaussian integral ($\\mathbb{E}\\zeta = 0$, $\\mathbb{E}\\zeta^2 = 1$): "
           "$I_2(a,b) = \\mathbb{E}[g(\\lambda_a)g(\\lambda_b)]$, "
           "$I_3(a,b,c) = \\mathbb{E}[g'(\\lambda_a)\\lambda_b g(\\lambda_c)]$, "
           "$I_4(a,b,c,d) = \\mathbb{E}[g'(\\lambda_a)g'(\\lambda_b)g(\\lambda_c)g(\\lambda_d)]$, "
           "$J_2(a,b) = \\mathbb{E}[g'(\\lambda_a)g'(\\lambda_b)]$ on the covariance of the "
           "named fields. Units are numbered $1..K$ (students), then $K+1..K+M$ (teachers). "
           f"Here $K = {K}$, $M = {M}$:\n\n"]
    out.append(eq("\\frac{dQ_{11}}{dt}", ode.dQ[0][0]))
    if K > 1:
        out.append(eq("\\frac{dQ_{12}}{dt}", ode.dQ[0][1]))
    out.append(eq("\\frac{dR_{11}}{dt}", ode.dR[0][0]))
    out.append(eq("\\frac{dc_1}{dt}", ode.dc[0]))
    out.append("In index form these are the ODEs of Saad & Solla and of Goldt et al. "
               "([committee.md](committee.md#the-odes)). `headflow.dynamics.symbolic.readout_rhs` "
               "evaluates the derived system with the unit's closed-form integrals; "
               "`tests/test_symbolic_readout.py` checks it against the exact field to "
               "round-off.\n\n")
    return "".join(out)
