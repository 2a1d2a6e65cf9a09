"""The derivation of the order-parameter ODEs (`docs/ode.md#derivation-of-the-odes`), in index
notation with sympy.

1. [`local_field_ode`][]: from the SGD update of a student vector to the increments of its
   overlaps, the high-dimensional limit `x_ℓ·x_ℓ'/D → δ_{ℓℓ'}` and the time `t = steps/D`:
   the generic local-field ODE, for any student/teacher vectors.
2. [`manifold_ode`][]: the same on the invariant manifold for the attention model: the value
   fields and the label noise integrated out given the key fields (Isserlis' theorem), the
   chain rule through the activation's derived Jacobian, and the expectations collected into
   named quantities (`a_h`, `C_hk`, `T^m`, `T^q`, `N^k`, `N^v`, `g^b`), per activation.
3. The paper's variables `(m, r, b, v)`, the closed-form pieces (risk, value-side equations,
   limits of `docs/model.md#population-risk`,
   `docs/model.md#bayes-optimal-risk-and-the-bayes-softmax-construction`, the Bayes-softmax
   construction) and the gradient-flow form of the
   key drift (derivatives of `a` and `C`): see `_closed.py`.

Every step is computed, not typed: the generic increments come from a small bilinear algebra of
vectors, the conditional moments from Gaussian linear forms, the Jacobians from the activation's
definition. The functions are cached (the derivation takes seconds).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools

import sympy as sp

from ._activations import jacobian_fn, symbolic_activation
from ._algebra import (SIGNAL_TOKEN, A, B, D, Delta, Expect, G, Gb, Ghat, L, LinearForm,
                       Omega, Term, b, canonical, chain_diff, chi, chis, contract, covariance,
                       e2, ell, eta, eta_b, expect, f, fresh, h, i_, isserlis, j_, js, k, kind,
                       lam_f, lim, m, n, p, prenex, pull_constants, q, rename, rho, s, u, wd, xi,
                       ys, z, zeta, vanishes, tidy, SYMMETRIC)

# -- 1. the generic local-field ODE ---------------------------------------------------------------

beta = sp.Symbol("beta", integer=True, positive=True)
_eps = sp.Symbol("epsilon", positive=True)      # D^{-1/2}


@dataclasses.dataclass(frozen=True)
class Equation:
    """`lhs = rhs`, with a short label; `rhs` may be a tuple of equal forms (`lhs = r1 = r2`)."""

    label: str
    lhs: sp.Basic
    rhs: sp.Basic | tuple


@dataclasses.dataclass(frozen=True)
class _V:
    """One term `coef · Σ_{limits} basis` of a vector: basis `("w", i)` (a student or teacher
    vector) or `("x", β, ℓ)` (token ℓ of sample β)."""

    coef: sp.Expr
    basis: tuple
    limits: tuple = ()


def _gram(u: tuple, v: tuple) -> sp.Expr:
    """`u·v` for basis vectors (the scale of each block fixed by the model,
    `docs/model.md#data-the-teacher`, `docs/ode.md#derivation-of-the-odes`)."""
    if u[0] == "w" and v[0] == "w":
        return D * Omega[u[1], v[1]]
    if u[0] == "x" and v[0] == "x":
        # x·x'/D → δδ, with O(D^{-1/2}) fluctuations (independent N(0, I_D) tokens)
        return D * (sp.KroneckerDelta(u[1], v[1]) * sp.KroneckerDelta(u[2], v[2])
                    + zeta[u[1], u[2], v[1], v[2]] / sp.sqrt(D))
    w, x = (u, v) if u[0] == "w" else (v, u)
    return sp.sqrt(D) * lam_f[w[1], x[1], x[2]]


def _dot(x: list[_V], y: list[_V], gram=_gram) -> sp.Expr:
    """`x·y` for vectors given as lists of terms, by bilinearity and the Gram rule `gram`."""
    total = sp.Integer(0)
    for t1 in x:
        taken = {lm[0] for lm in t1.limits}
        for t2 in y:
            ren: dict = {}
            for lm in t2.limits:
                if lm[0] in taken:
                    ren[lm[0]] = fresh(kind(lm[0]), taken | set(ren.values()))
            basis = tuple(ren.get(a, a) if isinstance(a, sp.Symbol) else a for a in t2.basis)
            limits = tuple((ren.get(lm[0], lm[0]),) + tuple(lm[1:]) for lm in t2.limits)
            term = t1.coef * t2.coef.xreplace(ren) * gram(t1.basis, basis)
            lims = t1.limits + limits
            total += sp.Sum(term, *lims) if lims else term
    return contract(total)


def _leading_order(e: sp.Expr) -> sp.Expr:
    """The `D → ∞` limit of an expression polynomial in `D^{±1/2}`, checking it is finite."""
    e = sp.expand(pull_constants(sp.expand(e)).subs(D, _eps**-2))
    parts = sp.collect(e, _eps, evaluate=False)
    powers = {}
    for key, val in parts.items():
        base, ex = key.as_base_exp()
        powers[ex if base == _eps else 0] = val
    if min(powers) < 0:
        raise AssertionError(f"divergent terms in the high-dimensional limit: {e}")
    return powers.get(0, sp.Integer(0))


def _over_samples(e: sp.Expr) -> sp.Expr:
    """`E` over the B i.i.d. samples of the batch: `E Σ_β f(sample β) = B E f(sample)`, then
    drop the sample index."""
    out = []
    for term in sp.Add.make_args(sp.expand(e)):
        summand, limits = prenex(term)
        samples = [lm for lm in limits if kind(lm[0]) == "sample"]
        rest = tuple(lm for lm in limits if kind(lm[0]) != "sample")
        if not samples:
            out.append(term)
            continue
        if len(samples) != 1:
            raise AssertionError(f"expected one sum over the batch in {term}")
        bt = samples[0][0]
        summand = summand.replace(
            lambda x: isinstance(x, sp.Indexed) and bt in x.indices,
            lambda x: x.base[tuple(i for i in x.indices if i != bt)])
        out.append(B * (sp.Sum(summand, *rest) if rest else summand))
    return expect(sp.Add(*out))


@functools.cache
def local_field_ode() -> dict[str, Equation]:
    """The generic ODE (`docs/ode.md#derivation-of-the-odes`) from one SGD step on a batch of B
    samples:

    `w_i ← (1 − ηλ/D) w_i − (η/(B√D)) Σ_β Σ_ℓ G_{iβℓ} x_{βℓ}` (the chain rule through
    `λ_{iβℓ} = w_i·x_{βℓ}/√D` gives `∂ℓ_β/∂w_i = Σ_ℓ G_{iβℓ} x_{βℓ}/√D`), teacher vectors fixed,
    biases `b ← b − (η_b/(DB)) Σ_β ∂ℓ_β/∂b`. In time `t = steps/D`, `dΩ/dt` is the limit of
    `D × E[ΔΩ]` as `D → ∞`.

    **Returns:** the equations `"step"`, `"increment"` (before the limit), `"ss"`
    (student–student), `"st"` (student–teacher) and `"bias"`.
    """
    ell_, beta_ = sp.Symbol("ell", integer=True, positive=True), beta
    step = [_V(1 - eta * wd / D, ("w", i_)),
            _V(-eta / (B * sp.sqrt(D)) * G[i_, beta_, ell_], ("x", beta_, ell_),
               ((ell_, 1, L), (beta_, 1, B)))]
    step_j = [_V(1 - eta * wd / D, ("w", j_)),
              _V(-eta / (B * sp.sqrt(D)) * G[j_, beta_, ell_], ("x", beta_, ell_),
                 ((ell_, 1, L), (beta_, 1, B)))]
    teacher = [_V(sp.Integer(1), ("w", js))]
    old_ss = _dot([_V(sp.Integer(1), ("w", i_))], [_V(sp.Integer(1), ("w", j_))])
    inc_ss = _dot(step, step_j) - old_ss                      # D ΔΩ_ij  (= ΔΩ_ij / dt)
    inc_st = _dot(step, teacher) - _dot([_V(sp.Integer(1), ("w", i_))], teacher)
    out = {}
    x = sp.IndexedBase("x")
    out["step"] = Equation("SGD step", sp.Symbol("w_i'"),
                           step[0].coef * sp.Symbol("w_i")
                           - eta / (B * sp.sqrt(D)) * sp.Sum(G[i_, beta_, ell_] * x[beta_, ell_],
                                                             *step[1].limits))
    out["increment"] = Equation("overlap increment", D * sp.Symbol(r"\Delta\Omega_{ij}"),
                                pull_constants(inc_ss))
    dss = _over_samples(_leading_order(inc_ss))
    dst = _over_samples(_leading_order(inc_st))
    out["ss"] = Equation("student-student", sp.Derivative(Omega[i_, j_], sp.Symbol("t")),
                         canonical(dss))
    out["st"] = Equation("student-teacher", sp.Derivative(Omega[i_, js], sp.Symbol("t")),
                         canonical(dst))
    bias_inc = -eta_b / B * sp.Sum(Gb[h, beta_], (beta_, 1, B))   # D Δb_h
    out["bias"] = Equation("bias", sp.Derivative(b[h], sp.Symbol("t")),
                           _over_samples(_leading_order(bias_inc)))
    return out


# -- 2. the invariant manifold: value fields integrated out --------------------------------------

ERR = sp.Symbol(r"\hat{y} - y")     # the prediction error, a Gaussian given the key fields
Y = sp.IndexedBase("Y")             # ∂(ŷ − y)/∂χ_{hℓ} = Σ z J: Gaussian given the keys
Yb = sp.IndexedBase("Y^b")          # ∂(ŷ − y)/∂b_h
gbh = sp.IndexedBase(r"\hat{g}^b")  # E[∂ℓ/∂b_h | keys] = ∂(½e²)/∂b_h
Gam = sp.IndexedBase("Gamma")       # Cov(Y_{hℓ}, Y_{kℓ} | keys)

# named expectations of the reduced system
a_ = sp.IndexedBase("a")
C_ = sp.IndexedBase("C")
Tm = sp.IndexedBase("T^m")
Tq = sp.IndexedBase("T^q")
Nk = sp.IndexedBase("N^k")
Nv = sp.IndexedBase("N^v")
gb_ = sp.IndexedBase("g^b")
SYMMETRIC.update({C_, Nk, Nv})   # symmetric by definition

_h1, _l1 = sp.Symbol("h'", integer=True, positive=True), sp.Symbol("ell'",
                                                                      integer=True, positive=True)


def value_cov(x: sp.Expr, y: sp.Expr) -> sp.Expr:
    """Covariances of the value fields, the teacher's value field and ξ given the key fields, on
    the invariant manifold (`docs/model.md#order-parameters`, `docs/model.md#population-risk`):
    independent across tokens, zero mean,
    `Cov(z_{hℓ}, z_{kp}) = s_{hk} δ_{ℓp}`, `Cov(z_{hℓ}, y*_p) = n_h δ_{ℓp}`,
    `Var y*_ℓ = ρ*`, `Var ξ = 1`."""
    def key(v):
        if v == xi:
            return ("xi",)
        if isinstance(v, sp.Indexed) and v.base == z:
            return ("z",) + v.indices
        if isinstance(v, sp.Indexed) and v.base == ys:
            return ("y",) + v.indices
        raise ValueError(f"not a value-side Gaussian variable: {v}")

    u, v = key(x), key(y)
    if u[0] == "xi" or v[0] == "xi":
        return sp.Integer(1) if u == v else sp.Integer(0)
    if u[0] == "z" and v[0] == "z":
        return s[u[1], v[1]] * sp.KroneckerDelta(u[2], v[2])
    if u[0] == "y" and v[0] == "y":
        return rho * sp.KroneckerDelta(u[1], v[1])
    zz, yy = (u, v) if u[0] == "z" else (v, u)
    return n[zz[1]] * sp.KroneckerDelta(zz[2], yy[1])


def error_form() -> LinearForm:
    """`ŷ − y = Σ_{hℓ} A_{hℓ} z_{hℓ} − y*_1 − Δ ξ` (the signal token is ℓ = 1)."""
    return LinearForm((Term(A[_h1, _l1], z[_h1, _l1], (lim(_h1), lim(_l1))),
                       Term(sp.Integer(-1), ys[SIGNAL_TOKEN]), Term(-Delta, xi)))


@dataclasses.dataclass(frozen=True)
class Manifold:
    """The reduced system of one activation, in index notation.

    **Fields:**
    - `jacobian`, `jacobian_b`: `∂A_{hℓ}/∂χ_{kp}`, `∂A_{hℓ}/∂b_k` (derived);
    - `stages`: per-node quantities in dependency order, `{name: (lhs, rhs)}`:
      `u = ∂(½e²)/∂A`, `e²`, `Ĝ = Σ u J`, `ĝ^b = Σ u J_b`, `Γ` in terms of A, u and the state;
    - `expanded`: `Ĝ` and `ĝ^b` written out in A and the state;
    - `integrands`: the named expectations `{name: (lhs, integrand)}` (`a, C, T^m, T^q, g^b,
      N^k, N^v`), each `lhs = E[integrand]`;
    - `rhs`: `{"m", "q", "n", "s", "b", "kv", "kvs", "vks"}` → `(lhs, rhs)`, the ODE in the named
      expectations;
    - `conditional`: per overlap block, the generic ODE with the value fields integrated out
      (the expectation over the key fields still explicit);
    - `checks`: identities verified on the way (`{label: expression that simplified to 0}`).
    """

    activation: str
    jacobian: sp.Expr
    jacobian_b: sp.Expr
    stages: dict
    expanded: dict
    integrands: dict
    rhs: dict
    conditional: dict
    checks: dict


def _simplifies_to_zero(e: sp.Expr) -> bool:
    return vanishes(contract(e))


@functools.cache
def manifold_ode(activation: str) -> Manifold:
    """Derive the reduced ODE on the invariant manifold for `activation` (a name with a
    symbolic definition). Raises `AssertionError` if an intermediate identity fails."""
    symbolic_activation(activation)
    jchi, jbias = jacobian_fn(activation)
    jc, jb = jchi(h, ell, k, p), jbias(h, ell, k)
    err = error_form()

    def y_form(hh, ll):
        """`Y_{hℓ} = ∂(ŷ − y)/∂χ_{hℓ} = Σ_{h'ℓ'} z_{h'ℓ'} ∂A_{h'ℓ'}/∂χ_{hℓ}`: the derivative of
        a linear form acts on its coefficients (chain rule through A)."""
        return LinearForm(tuple(
            Term(chain_diff(t.coef, chi[hh, ll], lambda a1, a2: jchi(a1, a2, hh, ll)),
                 t.var, t.limits) for t in err.terms[:1]))

    def yb_form(hh):
        return LinearForm(tuple(
            Term(chain_diff(t.coef, b[hh], lambda a1, a2: jbias(a1, a2, hh)), t.var, t.limits)
            for t in err.terms[:1]))

    checks = {}
    # per-node quantities
    e2_def = covariance(err, err, value_cov)
    half = e2_def / 2
    ghat_def = canonical(covariance(err, y_form(h, ell), value_cov))
    ghat_chain = chain_diff(half, chi[h, ell], lambda a1, a2: jchi(a1, a2, h, ell))
    checks["E[G^χ|keys] = ∂(½e²)/∂χ"] = ghat_def - ghat_chain
    gbh_def = canonical(covariance(err, yb_form(h), value_cov))
    checks["E[∂ℓ/∂b|keys] = ∂(½e²)/∂b"] = gbh_def - chain_diff(
        half, b[h], lambda a1, a2: jbias(a1, a2, h))
    gam_def = canonical(covariance(y_form(h, ell), y_form(k, ell), value_cov))
    u_def = sp.diff(half, A[h, ell])
    checks["Cov(ŷ−y, z|keys) = ∂(½e²)/∂A"] = (
        covariance(err, LinearForm((Term(sp.Integer(1), z[h, ell]),)), value_cov) - u_def)
    # the chain rule with u = ∂(½e²)/∂A kept as a symbol: the compact per-activation forms
    ta, la = fresh("head", {h, k}), fresh("token", {ell, p})
    ghat_u = canonical(contract(sp.Sum(u[ta, la] * jchi(ta, la, h, ell), lim(ta), lim(la))))
    gbh_u = canonical(contract(sp.Sum(u[ta, la] * jbias(ta, la, h), lim(ta), lim(la))))
    u_sub = lambda e: e.replace(  # noqa: E731
        lambda x: isinstance(x, sp.Indexed) and x.base == u,
        lambda x: rename(u_def, {h: x.indices[0], ell: x.indices[1]}))
    checks["Ĝ = Σ u J"] = u_sub(ghat_u) - ghat_def
    checks["ĝ^b = Σ u J_b"] = u_sub(gbh_u) - gbh_def
    for label, e in checks.items():
        if not _simplifies_to_zero(e):
            raise AssertionError(f"{activation}: identity {label} fails: {e}")

    stages = {"u": (u[h, ell], tidy(u_def)), "e2": (e2, tidy(e2_def)),
              "Ghat": (Ghat[h, ell], tidy(ghat_u)), "gbh": (gbh[h], tidy(gbh_u)),
              "Gamma": (Gam[h, k, ell], tidy(gam_def))}
    expanded = {"Ghat": tidy(ghat_def), "gbh": tidy(gbh_def)}

    # named covariances of the Gaussian factors (given the keys) ...
    def form_of(v):
        if v == ERR:
            return err
        if isinstance(v, sp.Indexed) and v.base == Y:
            return y_form(*v.indices)
        if isinstance(v, sp.Indexed) and v.base == Yb:
            return yb_form(*v.indices)
        return LinearForm((Term(sp.Integer(1), v),))

    def named_cov(x, y):
        pair = {x, y}
        if x == ERR and y == ERR:
            return e2
        if ERR in pair:
            other = y if x == ERR else x
            if isinstance(other, sp.Indexed) and other.base == Y:
                return Ghat[other.indices]
            if isinstance(other, sp.Indexed) and other.base == Yb:
                return gbh[other.indices]
        if (isinstance(x, sp.Indexed) and isinstance(y, sp.Indexed) and x.base == Y
                and y.base == Y and x.indices[1] == y.indices[1]):
            return Gam[x.indices[0], y.indices[0], x.indices[1]]
        return covariance(form_of(x), form_of(y), value_cov)

    def named(v):
        return LinearForm((Term(sp.Integer(1), v),))

    # ... and the sample quantities of each vector as (fixed factor, Gaussian factors)
    def grad(vec, ll):
        kd, hh = vec
        if kd == "key":
            return sp.Integer(1), [ERR, Y[hh, ll]]
        return A[hh, ll], [ERR]

    def field(vec, ll):
        kd, hh = vec
        return {"key": (chi[hh, ll] if hh is not None else None, []),
                "value": (sp.Integer(1), [z[hh, ll]] if hh is not None else []),
                "tkey": (chis[hh, ll], []),
                "tvalue": (sp.Integer(1), [ys[ll]])}[kd]

    def conditional(arg, vecs):
        """`E[arg | keys]` for an argument of the generic ODE, with G and λ of the generic
        vectors `i, j, j*` replaced by the model's."""
        summand, limits = prenex(arg)
        fixed, gauss = sp.Integer(1), []
        for fac in sp.Mul.make_args(summand):
            if not isinstance(fac, sp.Indexed):
                fixed *= fac
                continue
            vec, ll = vecs[fac.indices[0]], fac.indices[1]
            fx, gs = (grad if fac.base == G else field)(vec, ll)
            fixed, gauss = fixed * fx, gauss + gs
        val = fixed * isserlis([named(v) for v in gauss], named_cov)
        val = sp.expand(val)
        return sp.Sum(val, *limits) if limits and val != 0 else val

    generic = local_field_ode()
    overlap_of = {("key", "key"): q, ("value", "value"): s, ("key", "tkey"): m,
                  ("value", "tvalue"): n, ("key", "value"): None, ("key", "tvalue"): None,
                  ("value", "tkey"): None}
    blocks = {"q": ("ss", ("key", h), ("key", k)), "s": ("ss", ("value", h), ("value", k)),
              "kv": ("ss", ("key", h), ("value", k)),
              "m": ("st", ("key", h), ("tkey", f)), "n": ("st", ("value", h), ("tvalue", None)),
              "kvs": ("st", ("key", h), ("tvalue", None)),
              "vks": ("st", ("value", h), ("tkey", f))}
    named_defs = {
        "a": (a_[h], A[h, SIGNAL_TOKEN]),
        "C": (C_[h, k], sp.Sum(A[h, ell] * A[k, ell], lim(ell))),
        "T^m": (Tm[h, f], sp.Sum(Ghat[h, ell] * chis[f, ell], lim(ell))),
        "T^q": (Tq[h, k], sp.Sum(Ghat[h, ell] * chi[k, ell], lim(ell))),
        "g^b": (gb_[h], gbh[h]),
    }
    rhs, cond_eqs = {}, {}
    noise_names = {"q": "N^k", "s": "N^v"}
    for name, (which, vi, vj) in blocks.items():
        eq = generic[which]
        vecs = {i_: vi, j_: vj} if which == "ss" else {i_: vi, js: vj}
        ov = overlap_of[(vi[0], vj[0])]
        lhs_idx = tuple(x[1] for x in (vi, vj) if x[1] is not None)

        def spec(e):
            e = e.replace(lambda x: isinstance(x, Expect),
                          lambda x: Expect(conditional(x.args[0], vecs)))
            return e.replace(lambda x: isinstance(x, sp.Indexed) and x.base == Omega,
                             lambda x: (ov[lhs_idx] if ov is not None else sp.Integer(0)))

        cond = sp.expand(spec(eq.rhs))
        cond_eqs[name] = cond
        # the η² term is named as a whole (the noise matrices), the rest is linearized
        out = sp.Integer(0)
        for term in sp.Add.make_args(cond):
            ex = [x for x in term.atoms(Expect)]
            if not ex:
                out += term
                continue
            (ex,) = ex
            coef = term / ex
            arg = ex.args[0]
            if arg == 0:
                continue
            if coef.has(eta**2):
                nm = noise_names[name]
                base = Nk if nm == "N^k" else Nv
                named_defs.setdefault(nm, (base[h, k], canonical(arg)))
                out += coef * _recognize(Expect(arg), named_defs, only=(nm,))
            else:
                out += coef * _recognize(expect(arg), named_defs)
        lhs_base = {"q": q, "s": s, "m": m, "n": n}.get(name, sp.IndexedBase(name))
        rhs[name] = (sp.Derivative(lhs_base[lhs_idx], sp.Symbol("t")),
                     _collect_eta(canonical(out)))
    # db/dt: E[∂ℓ/∂b_h | keys] = Cov(ŷ − y, ∂(ŷ − y)/∂b_h)
    bias_cond = -eta_b * Expect(isserlis([named(ERR), named(Yb[h])], named_cov))
    rhs["b"] = (sp.Derivative(b[h], sp.Symbol("t")), _recognize(bias_cond, named_defs))
    for name, (_, e) in rhs.items():
        if e.has(Expect):
            raise AssertionError(f"{activation}: unnamed expectation left in d{name}/dt: {e}")
    return Manifold(activation=activation, jacobian=jc, jacobian_b=jb, stages=stages,
                    expanded=expanded, integrands=named_defs, rhs=rhs, conditional=cond_eqs,
                    checks=checks)


def _collect_eta(e: sp.Expr) -> sp.Expr:
    return sp.collect(sp.expand(e), [eta**2 / B, eta * wd, eta], evaluate=True)


def _free_indices(e: sp.Expr) -> list:
    idx = set()
    for x in e.atoms(sp.Indexed):
        idx |= {i for i in x.indices if isinstance(i, sp.Symbol)}
    bound = set()
    for sm in e.atoms(sp.Sum):
        bound |= {lm[0] for lm in sm.limits}
    return sorted(idx - bound, key=lambda x: x.name)


def _same(x: sp.Expr, y: sp.Expr) -> bool:
    """Equal as index expressions: structurally after normalization, else entry by entry."""
    return tidy(x) == tidy(y) or vanishes(x - y)


def _recognize(e: sp.Expr, named_defs: dict, only=None) -> sp.Expr:
    """Replace every `Expect(arg)` in `e` by the named expectation it equals (matching the
    definitions of `named_defs` under every renaming of their free indices)."""

    def name_of(ex):
        arg = ex.args[0]
        free = _free_indices(arg)
        for nm, (lhs, integrand) in named_defs.items():
            if only is not None and nm not in only:
                continue
            own = [i for i in lhs.indices]
            if len(own) != len(free):
                continue
            for perm in _perms(free):
                if [kind(x) for x in perm] != [kind(x) for x in own]:
                    continue
                cand = rename(integrand, dict(zip(own, perm)))
                if _same(cand, arg):
                    return rename(lhs, dict(zip(own, perm)))
        return ex

    return e.replace(lambda x: isinstance(x, Expect), name_of)


def _perms(xs):
    return itertools.permutations(xs)
