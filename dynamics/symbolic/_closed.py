"""The closed-form pieces of the system (issue 4, item 4), derived with sympy:

- [`risk`][]: `R = Δ² + ρ* − 2 Σ_h n_h a_h + Σ_{hk} s_{hk} C_{hk}` from the conditional error;
- [`limits`][]: `ŷ ≡ 0 ⇒ R = Δ² + ρ*` (`docs/model.md#population-risk`); `θ ≡ 0 ⇒ R_Bayes = Δ² +
  ρ*(1 − 1/L)` and
  infinite signal `⇒ R_Bayes → Δ²`
  (`docs/model.md#bayes-optimal-risk-and-the-bayes-softmax-construction`);
- [`bayes_construction`][]: with one Bayes-softmax head per support point, `Σ_h A_{hℓ}` is the
  posterior `p_ℓ` and `e² = Δ² + ρ*(1 − 2p_1 + Σ_ℓ p_ℓ²)`, hence `R = R_Bayes`;
- [`paper_variables`][]: the key equations in `(m, r = q − m mᵀ)` and the value overlaps
  `v = (n, s)`;
- [`gradient_flow`][]: the η¹ (drift) part of the key equations as population gradient flow,
  i.e. in terms of the derivatives of `a` and `C` with respect to `(m, q, b)`.
"""

from __future__ import annotations

import functools

import sympy as sp

from . import _algebra
from ._algebra import (SIGNAL_TOKEN, A, D, Delta, Expect, F, H, L, b, chi, chis, ell, eta,
                       eta_b, expect, f, fresh, g, h, instantiate, k, lim, m, n, q, r, rho, s,
                       tidy, wd)
from ._derive import C_, Equation, Ghat, Tq, _dot, _leading_order, _recognize, _V, a_, manifold_ode

gperp = sp.IndexedBase(r"g^{\perp}")        # standard normals of the key fields ⊥ the signal
Rh = sp.IndexedBase(r"r^{1/2}")            # symmetric square root of r
Tp = sp.IndexedBase(r"T^{\perp}")          # E[Σ_ℓ Ĝ_{hℓ} g⊥_{kℓ}]
post = sp.IndexedBase("p")                  # posterior over the location
theta = sp.IndexedBase("theta")             # support points θ^h (one head per point)
pw = sp.IndexedBase("p^{\\theta}")          # their weights
nu = sp.Symbol("nu", positive=True)         # signal strength ν (θ = √ν)
gn = sp.IndexedBase("g")                    # teacher-key normals of the spike limit
R_ = sp.Symbol("R")


class Raw(sp.Symbol):
    """A symbol printed verbatim in LaTeX (for labels such as `∂R/∂m`)."""

    def _latex(self, printer):
        return self.name


@functools.cache
def risk() -> Equation:
    """`R = E(ŷ − y)² = E_keys[e²]`, linearized into the named expectations `a`, `C`."""
    M = manifold_ode("softmax")   # e² and the names do not depend on the activation
    _, e2_def = M.stages["e2"]
    val = _recognize(expect(e2_def), M.integrands)
    return Equation("population risk", R_, tidy(val, pretty=True))


@functools.cache
def limits() -> dict[str, Equation]:
    """The limits of `docs/model.md#population-risk`,
    `docs/model.md#bayes-optimal-risk-and-the-bayes-softmax-construction`, each derived from the
    general expression."""
    R = risk().rhs
    assert isinstance(R, sp.Expr)
    out = {}
    zero_values = R.replace(lambda x: isinstance(x, sp.Indexed) and x.base in (n, s),
                            lambda x: sp.Integer(0))
    out["no values"] = Equation("ŷ ≡ 0 (n = 0, s = 0)", R_, sp.simplify(zero_values.doit()))
    zero_attention = R.replace(lambda x: isinstance(x, sp.Indexed) and x.base in (a_, C_),
                               lambda x: sp.Integer(0))
    out["heads off"] = Equation("ŷ ≡ 0 (A ≡ 0: a = 0, C = 0)", R_,
                                sp.simplify(zero_attention.doit()))
    # Bayes: p_ℓ = π(χ*_ℓ)/Σ π, π(c) = E_θ exp(θ·c − |θ|²/2); θ ≡ 0 ⇒ π ≡ 1
    lp = fresh("token", {ell})
    pi = sp.Function("pi")
    p_def = pi(ell) / sp.Sum(pi(lp), (lp, 1, L))
    p0 = p_def.replace(lambda x: isinstance(x, sp.Function) and x.func == pi,
                       lambda x: sp.Integer(1)).doit()
    sum_p2 = sp.Sum(p0**2, (ell, 1, L)).doit()
    out["posterior theta=0"] = Equation("θ ≡ 0: posterior", post[ell], p0)
    out["bayes theta=0"] = Equation("θ ≡ 0: Bayes risk", Raw("R_{Bayes}"),
                                    sp.factor_terms(Delta**2 + rho * (1 - sum_p2)))
    # infinite signal, one spike θ = √ν (F = 1): π(c) = exp(√ν c − ν/2), χ*_1 = √ν + g_1,
    # χ*_ℓ = g_ℓ (ℓ ≠ 1); the ratios p_ℓ/p_1 = π(χ*_ℓ)/π(χ*_1) vanish as ν → ∞
    sq = sp.sqrt(nu)
    pi_spike = lambda c: sp.exp(sq * c - nu / 2)  # noqa: E731
    ratio = sp.simplify(pi_spike(gn[lp]) / pi_spike(sq + gn[SIGNAL_TOKEN]))
    lim0 = sp.limit(ratio, nu, sp.oo)
    out["spike ratio"] = Equation("one spike θ = √ν (F = 1), a token ℓ' ≠ 1",
                                  Raw(r"p_{\ell'}/p_1"), ratio)
    out["strong signal"] = Equation("ν → ∞", Raw(r"\lim_{\nu\to\infty} p_{\ell'}/p_1"),
                                    lim0)
    rat = sp.Function("rho_ratio")
    sum_p2 = ((1 + sp.Sum(rat(lp) ** 2, (lp, 2, L))) / (1 + sp.Sum(rat(lp), (lp, 2, L))) ** 2)
    sum_p2 = sum_p2.replace(lambda x: isinstance(x, sp.Function) and x.func == rat,
                            lambda x: lim0).doit()
    out["bayes strong"] = Equation("ν → ∞: Bayes risk", Raw(r"\lim_{\nu\to\infty} R_{Bayes}"),
                                   sp.simplify(Delta**2 + rho * (1 - sum_p2)))
    return out


@functools.cache
def bayes_construction(sizes=((2, 2, 1), (3, 2, 2), (2, 3, 2))) -> dict:
    """The Bayes-softmax construction
    (`docs/model.md#bayes-optimal-risk-and-the-bayes-softmax-construction`) in index notation,
    verified at `sizes`
    `(S = H, L, F)`: `m = Θ`, `q = ΘΘᵀ` (so `r = 0` and `χ_{hℓ} = Σ_f θ_{hf} χ*_{fℓ}`),
    `b_h = log p_h − |θ_h|²/2`, `n = ρ* 1`, `s = ρ* 11ᵀ`.

    **Returns:** `{"equations": [...], "verified": [(S, L, F), ...]}`; raises if an identity
    fails.
    """
    ff, hp_ = fresh("feature", {f}), fresh("head", {h})
    lp = fresh("token", {ell})
    chi_c = lambda hh, ll: sp.Sum(theta[hh, ff] * chis[ff, ll], (ff, 1, F))  # noqa: E731
    b_c = lambda hh: sp.log(pw[hh]) - sp.Sum(theta[hh, ff] ** 2, (ff, 1, F)) / 2  # noqa: E731
    A_c = sp.exp(chi_c(h, ell) + b_c(h)) / sp.Sum(sp.exp(chi_c(hp_, lp) + b_c(hp_)),
                                                   (lp, 1, L), (hp_, 1, H))
    pi = lambda ll: sp.Sum(pw[hp_] * sp.exp(chi_c(hp_, ll)  # noqa: E731
                                            - sp.Sum(theta[hp_, ff] ** 2, (ff, 1, F)) / 2),
                           (hp_, 1, H))
    p_c = pi(ell) / sp.Sum(pi(lp), (lp, 1, L))
    M = manifold_ode("bayes_softmax")
    _, e2_def = M.stages["e2"]
    e2_c = e2_def.replace(lambda x: isinstance(x, sp.Indexed) and x.base == n,
                          lambda x: rho).replace(
        lambda x: isinstance(x, sp.Indexed) and x.base == s, lambda x: rho)
    e2_target = Delta**2 + rho * (1 - 2 * post[SIGNAL_TOKEN]
                                  + sp.Sum(post[lp] ** 2, (lp, 1, L)))
    verified = []
    for S_, L_, F_ in sizes:
        head_sum = [sp.simplify(instantiate(sp.Sum(A_c, (h, 1, H)), (S_, L_, F_), {ell: ll},
                                            expand=False)
                                - instantiate(p_c, (S_, L_, F_), {ell: ll}, expand=False))
                    for ll in range(1, L_ + 1)]
        if any(x != 0 for x in head_sum):
            raise AssertionError(f"Σ_h A_hℓ ≠ p_ℓ at {(S_, L_, F_)}: {head_sum}")
        # e² with n = ρ1, s = ρ11ᵀ, written with the column sums P_ℓ = Σ_h A_hℓ
        Pcol = sp.IndexedBase("P")
        e2_num = instantiate(e2_c, (S_, L_, F_))
        col = {sp.Symbol(f"P{ll}"): sum(A[hh, ll] for hh in range(1, S_ + 1))
               for ll in range(1, L_ + 1)}
        target = instantiate(e2_target.replace(
            lambda x: isinstance(x, sp.Indexed) and x.base == post,
            lambda x: Pcol[x.indices]), (S_, L_, F_))
        target = target.xreplace({Pcol[ll]: col[sp.Symbol(f"P{ll}")]
                                  for ll in range(1, L_ + 1)})
        if sp.expand(e2_num - target) != 0:
            raise AssertionError(f"e² of the construction at {(S_, L_, F_)}")
        verified.append((S_, L_, F_))
    eqs = [Equation("keys and biases", Raw(r"\chi_{h\ell} + b_h"),
                    chi_c(h, ell) + b_c(h)),
           Equation("Bayes-softmax weights", A[h, ell], A_c),
           Equation("column sums = posterior", sp.Sum(A[h, ell], (h, 1, H)), p_c),
           Equation("conditional error", sp.Symbol("e^2"), e2_target)]
    return {"equations": eqs, "verified": verified}


@functools.cache
def paper_variables() -> dict[str, Equation]:
    """The key side in `(m, r)`: with `χ_ℓ = m χ*_ℓ + r^{1/2} g⊥_ℓ`,
    `T^q = T^m mᵀ + T^⊥ r^{1/2}` and `dr/dt = dq/dt − (dm/dt) mᵀ − m (dm/dt)ᵀ`."""
    M = manifold_ode("softmax")
    fp, kp = fresh("feature", {f, g}), fresh("head", {h, k})
    chi_sub = lambda kk, ll: (sp.Sum(m[kk, fp] * chis[fp, ll], (fp, 1, F))  # noqa: E731
                              + sp.Sum(Rh[kk, kp] * gperp[kp, ll], (kp, 1, H)))
    lhs_q, tq_def = M.integrands["T^q"]
    tq_sub = tq_def.replace(lambda x: isinstance(x, sp.Indexed) and x.base == chi,
                            lambda x: chi_sub(*x.indices))
    names = dict(M.integrands)
    names["T^perp"] = (Tp[h, k], sp.Sum(Ghat[h, ell] * gperp[k, ell], lim(ell)))
    with _random(gperp):
        tq_named = _recognize(expect(tq_sub), names)
    if tq_named.has(Expect):
        raise AssertionError(f"T^q not closed: {tq_named}")
    out = {"Tq": Equation("T^q in paper variables", Tq[h, k], tidy(tq_named, pretty=True)),
           "Tperp": Equation("T^⊥", Tp[h, k], Expect(names["T^perp"][1]))}
    # dr/dt, checked with explicit symbolic matrices (any H, F: here 2, 3 and 3, 2)
    for Hn, Fn in ((2, 3), (3, 2)):
        mm = sp.Matrix(Hn, Fn, lambda i, j: sp.Symbol(f"m{i}{j}"))
        Rm = sp.Matrix(Hn, Hn, lambda i, j: sp.Symbol(f"R{min(i, j)}{max(i, j)}"))
        TmM = sp.Matrix(Hn, Fn, lambda i, j: sp.Symbol(f"Tm{i}{j}"))
        TpM = sp.Matrix(Hn, Hn, lambda i, j: sp.Symbol(f"Tp{i}{j}"))
        Nk = sp.Matrix(Hn, Hn, lambda i, j: sp.Symbol(f"N{min(i, j)}{max(i, j)}"))
        Bb = sp.Symbol("B")
        rr = Rm * Rm
        qq = rr + mm * mm.T
        TqM = TmM * mm.T + TpM * Rm
        dq = -eta * (TqM + TqM.T) + eta**2 / Bb * Nk - 2 * eta * wd * qq
        dm = -eta * TmM - eta * wd * mm
        dr = dq - dm * mm.T - mm * dm.T
        target = -eta * (TpM * Rm + Rm * TpM.T) + eta**2 / Bb * Nk - 2 * eta * wd * rr
        if sp.simplify(dr - target) != sp.zeros(Hn, Hn):
            raise AssertionError("dr/dt identity fails")
    out["dr"] = Equation(
        "dr/dt", sp.Derivative(r[h, k], sp.Symbol("t")),
        tidy(-eta * (sp.Sum(Tp[h, kp] * Rh[kp, k], (kp, 1, H))
                     + sp.Sum(Rh[h, kp] * Tp[k, kp], (kp, 1, H)))
             + eta**2 / sp.Symbol("B", positive=True, integer=True) * sp.IndexedBase("N^k")[h, k]
             - 2 * eta * wd * r[h, k], pretty=True))
    return out


class _random:
    """Temporarily treat extra tensors as random in [`expect`][]."""

    def __init__(self, *bases):
        self.bases = bases

    def __enter__(self):
        self._old = _algebra.RANDOM_BASES
        _algebra.RANDOM_BASES = frozenset(self._old | set(self.bases))

    def __exit__(self, *exc):
        _algebra.RANDOM_BASES = self._old


# -- gradient-flow form -------------------------------------------------------------------------

Rm_ = sp.IndexedBase(r"\partial R/\partial m")
Rq_ = sp.IndexedBase(r"\partial R/\partial q")
Rb_ = sp.IndexedBase(r"\partial R/\partial b")
Da_m = sp.IndexedBase(r"\partial a/\partial m")      # [k, h, f] = ∂a_k/∂m_{hf}
DC_m = sp.IndexedBase(r"\partial C/\partial m")      # [k, k', h, f]
Da_q = sp.IndexedBase(r"\partial a/\partial q")      # [k, h, h']
DC_q = sp.IndexedBase(r"\partial C/\partial q")
Da_b = sp.IndexedBase(r"\partial a/\partial b")      # [k, h]
DC_b = sp.IndexedBase(r"\partial C/\partial b")


def _key_gram(u: tuple, v: tuple) -> sp.Expr:
    """Gram rule of student keys `("k", h)` and teacher keys `("t", f)`."""
    (ku, iu), (kv, iv) = u, v
    if ku == "k" and kv == "k":
        return D * q[iu, iv]
    if ku == "t" and kv == "t":
        return D * sp.KroneckerDelta(iu, iv)
    i_k, i_t = (iu, iv) if ku == "k" else (iv, iu)
    return D * m[i_k, i_t]


@functools.cache
def gradient_flow() -> dict[str, Equation]:
    """The drift of the key overlaps and biases as gradient flow of `R/2`: the step
    `k_h ← k_h − (η/2) ∇_{k_h} R` with `∇_{k_h} R = (1/D)(Σ_f ∂R/∂m_{hf} k*_f +
    Σ_k (∂R/∂q_{hk} + ∂R/∂q_{kh}) k_k)` (chain rule through `m = KK*ᵀ/D`, `q = KKᵀ/D`), pushed
    to the overlaps by the same bilinear algebra as the SGD step; `R` from [`risk`][], so the
    derivatives are those of `a` and `C`.

    These equal the η¹ terms of the reduced ODE: `T^m` and `g^b` node by node (the direction
    `k_h → k_h + ε k*_f` leaves `r` unchanged), `T^q` in expectation (Gaussian integration by
    parts); `tests/test_symbolic.py` checks both.
    """
    fp, kp = fresh("feature", {f, g}), fresh("head", {h, k})
    Sq = lambda x, y: Rq_[x, y] + Rq_[y, x]  # noqa: E731

    def step(hh):
        return [_V(sp.Integer(1), ("k", hh)),
                _V(-eta / (2 * D) * Rm_[hh, fp], ("t", fp), ((fp, 1, F),)),
                _V(-eta / (2 * D) * Sq(hh, kp), ("k", kp), ((kp, 1, H),))]

    dm = _leading_order(_dot(step(h), [_V(sp.Integer(1), ("t", f))], _key_gram)
                        - D * m[h, f])
    dq = _leading_order(_dot(step(h), step(k), _key_gram) - D * q[h, k])
    out = {"m": Equation("gradient flow: m", sp.Derivative(m[h, f], sp.Symbol("t")),
                         tidy(dm, pretty=True)),
           "q": Equation("gradient flow: q", sp.Derivative(q[h, k], sp.Symbol("t")),
                         tidy(dq, pretty=True)),
           "b": Equation("gradient flow: b", sp.Derivative(b[h], sp.Symbol("t")),
                         -eta_b / 2 * Rb_[h])}
    # ∂R/∂(m, q, b) through a and C (chain rule on R = Δ² + ρ* − 2 n·a + Σ s C)
    R = risk().rhs
    assert isinstance(R, sp.Expr)
    kk, kk2 = fresh("head", {h, k}), fresh("head", {h, k, fresh("head", {h, k})})
    dR_da = sp.diff(R, a_[kk])
    dR_dC = sp.diff(R, C_[kk, kk2])
    for name, base, Da, DC, idx in (("m", Rm_, Da_m, DC_m, (h, f)),
                                    ("q", Rq_, Da_q, DC_q, (h, k)),
                                    ("b", Rb_, Da_b, DC_b, (h,))):
        val = (sp.Sum(dR_da * Da[(kk,) + idx], (kk, 1, H))
               + sp.Sum(dR_dC * DC[(kk, kk2) + idx], (kk, 1, H), (kk2, 1, H)))
        out["dR/d" + name] = Equation(f"∂R/∂{name}", base[idx], tidy(val, pretty=True))
    return out
