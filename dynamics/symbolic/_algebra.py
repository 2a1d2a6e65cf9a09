"""Index-notation algebra for the derivation: symbols, Kronecker-delta contraction, the
expectation operator, Gaussian linear forms (Isserlis' theorem) and the chain rule through the
attention weights.

Everything is plain sympy: sums are `sympy.Sum` over integer indices with symbolic ranges
(`1..L` tokens, `1..H` heads, `1..F` features), tensors are `sympy.IndexedBase`s, and the sizes
only become numbers when a derived expression is instantiated for code generation
([`headflow.dynamics.symbolic.instantiate`][]). Tokens are numbered from 1 and the signal token is
`ℓ = 1` (the code's `SIGNAL = 0`).
"""

from __future__ import annotations

import dataclasses
import itertools

import sympy as sp
from sympy.concrete.delta import deltasummation

# -- sizes, indices, state and tensors ---------------------------------------------------------

H, L, F, B, D = sp.symbols("H L F B D", integer=True, positive=True)
"""Heads, tokens, latent directions, mini-batch size and the dimension."""

eta = sp.Symbol("eta", positive=True)            # η, step size of keys and values
eta_b = sp.Symbol("eta_b", positive=True)        # η_b, step size of the biases
wd = sp.Symbol("lambda_wd", nonnegative=True)     # λ, weight decay (rendered λ)
rho = sp.Symbol("rho^*", positive=True)          # ρ* = |v*|²/D
Delta = sp.Symbol("Delta", nonnegative=True)     # Δ, label noise

# free indices
h, k = sp.symbols("h k", integer=True, positive=True)             # heads
f, g = sp.symbols("f g", integer=True, positive=True)             # features
ell, p = sp.symbols("ell p", integer=True, positive=True)         # tokens

SIGNAL_TOKEN = 1
"""The token carrying the signal (math numbering; the code's `SIGNAL` is 0)."""

# state (order parameters) ...
m = sp.IndexedBase("m")                 # K K*ᵀ/D
q = sp.IndexedBase("q")                 # K Kᵀ/D
r = sp.IndexedBase("r")                 # q − m mᵀ
n = sp.IndexedBase("n")                 # V v*/D
s = sp.IndexedBase("s")                 # V Vᵀ/D
b = sp.IndexedBase("b")                 # biases
# ... fields of one sample ...
chi = sp.IndexedBase("chi")             # student key fields χ_{hℓ}
chis = sp.IndexedBase("chi^*")          # teacher key fields χ*_{fℓ}
z = sp.IndexedBase("z")                 # student value fields z_{hℓ}
ys = sp.IndexedBase("y^*")              # teacher value field y*_ℓ
xi = sp.Symbol("xi")                    # label-noise normal ξ
A = sp.IndexedBase("A")                 # attention weights A_{hℓ} = σ(χ + b)_{hℓ}
# ... and quantities derived from them (names of the rendered equations)
Ghat = sp.IndexedBase(r"\hat{G}")       # E[G^χ | keys] = ∂(½e²)/∂χ
u = sp.IndexedBase("u")                 # ∂(½e²)/∂A
e2 = sp.Symbol("e^2")                   # E[(ŷ − y)² | keys]

# the generic local-field derivation (`docs/ode.md#derivation-of-the-odes`)
Omega = sp.IndexedBase("Omega")         # Gram matrix of all vectors / D
lam_f = sp.IndexedBase("lambda")        # local fields λ_{iℓ} = w_i·x_ℓ/√D
G = sp.IndexedBase("G")                 # ∂ℓ/∂λ_{iℓ}
Gb = sp.IndexedBase("G^b")              # ∂ℓ/∂b_h
zeta = sp.IndexedBase("zeta")           # √D (x·x'/D − δδ), the fluctuation of the token Gram

RANDOM_BASES = frozenset({chi, chis, z, ys, A, Ghat, u, lam_f, G, Gb, zeta})
"""Tensors that depend on the sample (everything the expectation acts on)."""

# -- fresh dummy indices -------------------------------------------------------------------------

# generic student (i, j) and teacher (j*) vectors of the local-field derivation
i_, j_ = sp.symbols("i j", integer=True, positive=True)
js = sp.Symbol("j^*", integer=True, positive=True)

_KIND_OF = {h: "head", k: "head", f: "feature", g: "feature", ell: "token", p: "token",
            i_: "student", j_: "student", js: "teacher"}
# Dummies never take the names of free indices (h, k, f, g, ℓ, p) during the derivation; only
# the final `canonical(..., pretty=True)` reuses those names where nothing is captured.
_POOLS = {"head": ("h'", "k'", "h''", "k''", "a", "c", "a'", "c'", "a''", "c''"),
          "feature": ("f'", "g'", "f''", "g''"),
          "token": ("ell'", "p'", "ell''", "p''", "t", "t'", "t''", "u'"),
          "sample": ("beta", "beta'", "beta''")}
_PRETTY = {"head": ("h", "k"), "feature": ("f", "g"), "token": ("ell", "p")}


def index(name: str) -> sp.Symbol:
    """An integer index symbol (dummies and free indices alike)."""
    return sp.Symbol(name, integer=True, positive=True)


def kind(i: sp.Symbol) -> str:
    """`"head"`, `"feature"`, `"token"` or `"sample"` for a known index."""
    if i in _KIND_OF:
        return _KIND_OF[i]
    for kd, names in _POOLS.items():
        if i.name in names or i.name in _PRETTY.get(kd, ()):
            return kd
    raise KeyError(f"unknown index {i}")


def fresh(kd: str, avoid, *, pretty: bool = False) -> sp.Symbol:
    """The first index of kind `kd` whose name is not among the symbols `avoid` (with
    `pretty`, the plain names h, k, ℓ, ... come first)."""
    used = {getattr(a, "name", None) for a in avoid}
    for name in (_PRETTY.get(kd, ()) if pretty else ()) + _POOLS[kd]:
        if name not in used:
            return index(name)
    for i in itertools.count(2):  # pragma: no cover - pools are large enough here
        name = f"{_POOLS[kd][0]}_{i}"
        if name not in used:
            return index(name)


def upper(kd: str):
    """Upper summation limit of an index kind."""
    return {"head": H, "feature": F, "token": L, "sample": B}[kd]


def pull_constants(e: sp.Basic) -> sp.Basic:
    """Distribute every sum over additions and move the factors that do not depend on its
    dummies out of it."""

    def do(sm: sp.Sum) -> sp.Basic:
        fn = pull_constants(sm.function)
        dummies = {lm[0] for lm in sm.limits}
        out = []
        for t in sp.Add.make_args(sp.expand(fn)):
            facs = sp.Mul.make_args(t)
            const = sp.Mul(*[x for x in facs if not (x.free_symbols & dummies)])
            rest = sp.Mul(*[x for x in facs if x.free_symbols & dummies])
            used = tuple(lm for lm in sm.limits if lm[0] in rest.free_symbols)
            unused = [lm for lm in sm.limits if lm[0] not in rest.free_symbols]
            mult = sp.Mul(*[lm[2] - lm[1] + 1 for lm in unused])
            out.append(const * mult * (sp.Sum(rest, *used) if used else rest))
        return sp.Add(*out)

    return e.replace(lambda x: isinstance(x, sp.Sum), do)


def lim(i: sp.Symbol) -> tuple:
    """`(i, 1, upper)`: a summation limit over all values of `i`'s kind."""
    return (i, 1, upper(kind(i)))


# -- expectation -------------------------------------------------------------------------------

class Expect(sp.Function):
    """`E[·]` over one sample (θ, the Gaussian fields, ξ). Linear; see `expect`."""

    nargs = 1

    def _latex(self, printer):
        return r"\mathbb{E}\left[" + printer._print(self.args[0]) + r"\right]"


def is_random(e: sp.Basic) -> bool:
    """Does `e` depend on the sample?"""
    if e.has(xi) or e.has(e2):
        return True
    return any(isinstance(x, sp.Indexed) and x.base in RANDOM_BASES
               for x in e.atoms(sp.Indexed))


# -- Kronecker deltas ----------------------------------------------------------------------------

def _squash_delta_powers(e: sp.Basic) -> sp.Basic:
    """`δ^n = δ` (n ≥ 1)."""
    return e.replace(lambda x: x.is_Pow and isinstance(x.base, sp.KroneckerDelta)
                     and x.exp.is_Integer and x.exp > 0, lambda x: x.base)


def _avoid_capture(e: sp.Basic, names: set) -> sp.Basic:
    """Rename the dummies of the sums inside `e` that are among `names` (so substituting one
    of `names` for an outer index cannot be captured)."""

    def do(sm: sp.Sum) -> sp.Basic:
        fn = _avoid_capture(sm.function, names)
        ren: dict = {}
        for lm in sm.limits:
            if lm[0] in names:
                ren[lm[0]] = fresh(kind(lm[0]), names | e.free_symbols | fn.free_symbols
                                   | set(ren.values()) | {x[0] for x in sm.limits})
        if not ren:
            return sp.Sum(fn, *sm.limits)
        return sp.Sum(fn.xreplace(ren), *[(ren.get(lm[0], lm[0]),) + tuple(lm[1:])
                                          for lm in sm.limits])

    return e.replace(lambda x: isinstance(x, sp.Sum), do)


def contract(e: sp.Basic) -> sp.Basic:
    """Evaluate every sum over an index that appears in a Kronecker delta of its summand
    (`Σ_ℓ f_ℓ δ_{ℓp} = f_p`), innermost first, distributing sums over additions."""

    def do(sm: sp.Sum) -> sp.Basic:
        fn = contract(sm.function)
        limits = list(sm.limits)
        for j in range(len(limits) - 1, -1, -1):
            var = limits[j][0]
            terms = sp.Add.make_args(sp.expand(_squash_delta_powers(fn)))
            out = []
            for t in terms:
                deltas = [d for d in t.atoms(sp.KroneckerDelta) if var in d.free_symbols]
                if deltas:
                    partners = set().union(*(d.free_symbols for d in deltas)) - {var}
                    t = _avoid_capture(t, partners)
                    out.append(deltasummation(t, limits[j], no_piecewise=True))
                elif var in t.free_symbols:
                    out.append(sp.Sum(t, limits[j]))
                else:
                    out.append(t * (limits[j][2] - limits[j][1] + 1))
            fn = sp.Add(*out)
        return fn

    for _ in range(8):  # a contraction can expose new deltas to an outer sum
        new = _squash_delta_powers(e).replace(lambda x: isinstance(x, sp.Sum), do)
        if new == e:
            break
        e = new
    return e


def prenex(term: sp.Basic) -> tuple[sp.Basic, tuple]:
    """A product with sums as factors, as `(summand, limits)` with all sums pulled out (their
    dummies renamed apart where they clash)."""
    factors = sp.Mul.make_args(term)
    summand, limits = sp.Integer(1), []
    taken = set(term.free_symbols)
    for fac in factors:
        if isinstance(fac, sp.Sum):
            inner, inner_limits = prenex(fac.function)
            lims = list(fac.limits) + list(inner_limits)
            ren: dict = {}
            for lm in lims:
                v = lm[0]
                if v in taken:
                    ren[v] = fresh(kind(v), taken | set(ren.values()))
                taken.add(ren.get(v, v))
            inner = inner.xreplace(ren)
            summand = summand * inner
            limits += [(ren.get(lm[0], lm[0]),) + tuple(lm[1:]) for lm in lims]
        else:
            summand = summand * fac
    return summand, tuple(limits)


def canonical(e: sp.Basic, *, pretty: bool = False, _outer=frozenset()) -> sp.Basic:
    """Rename summation dummies to the first free names of their kind, outermost first (so
    equal expressions print equally). `pretty` allows the plain names (h, k, ℓ, ...) wherever
    they are not free in the whole expression."""
    top = set(e.free_symbols) | set(_outer)

    def do(sm: sp.Sum) -> sp.Basic:
        fn = canonical(sm.function, pretty=pretty, _outer=frozenset(top))
        outer = sm.free_symbols | top
        ren: dict = {}
        new_limits: list = []
        for lm in sm.limits:
            v = lm[0]
            nv = fresh(kind(v), outer | set(ren.values()) | (fn.free_symbols - {v}),
                       pretty=pretty)
            ren[v] = nv
            new_limits.append((nv,) + tuple(lm[1:]))
        return sp.Sum(fn.xreplace(ren), *new_limits)

    return e.replace(lambda x: isinstance(x, sp.Sum), do)


def expect(e: sp.Basic) -> sp.Basic:
    """`E[e]` with linearity applied: sums over indices of deterministic factors and the
    deterministic factors themselves are pulled out; what remains inside is one `Expect` per
    term."""
    out = []
    for term in sp.Add.make_args(sp.expand(e)):
        summand, limits = prenex(term)
        facs = sp.Mul.make_args(summand)
        rand = sp.Mul(*[x for x in facs if is_random(x)])
        det = sp.Mul(*[x for x in facs if not is_random(x)])
        inner = tuple(lm for lm in limits if lm[0] not in det.free_symbols)
        outer = tuple(lm for lm in limits if lm[0] in det.free_symbols)
        if rand == 1:
            val = det * (sp.Sum(1, *inner).doit() if inner else 1)
        else:
            val = det * Expect(sp.Sum(rand, *inner) if inner else rand)
        out.append(sp.Sum(val, *outer) if outer else val)
    return contract(sp.Add(*out))


# -- Gaussian linear forms ---------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Term:
    """`Σ_{limits} coef · var`: one term of a linear form in Gaussian variables."""

    coef: sp.Expr
    var: sp.Expr
    limits: tuple = ()


@dataclasses.dataclass(frozen=True)
class LinearForm:
    """`Σ_t Σ_{limits_t} coef_t var_t`: a linear combination of (conditionally) centred Gaussian
    variables whose coefficients may depend on other, fixed, quantities."""

    terms: tuple[Term, ...]

    def as_expr(self) -> sp.Expr:
        return sp.Add(*[sp.Sum(t.coef * t.var, *t.limits) if t.limits else t.coef * t.var
                        for t in self.terms])

    def map_coef(self, fn) -> LinearForm:
        return LinearForm(tuple(Term(fn(t.coef, t), t.var, t.limits) for t in self.terms))


def _apart(t: Term, avoid) -> Term:
    """Rename `t`'s summation dummies away from the symbols `avoid`."""
    dummies = {lm[0] for lm in t.limits}
    ren: dict = {}
    taken = set(avoid) | ((t.coef.free_symbols | t.var.free_symbols) - dummies)
    for lm in t.limits:
        v = lm[0]
        if v in taken:
            ren[v] = fresh(kind(v), taken | set(ren.values()))
        taken.add(ren.get(v, v))
    return Term(t.coef.xreplace(ren), t.var.xreplace(ren),
                tuple((ren.get(lm[0], lm[0]),) + tuple(lm[1:]) for lm in t.limits))


def covariance(x: LinearForm, y: LinearForm, cov) -> sp.Expr:
    """`E[x y]` for centred jointly Gaussian forms, with `cov(var1, var2)` the covariance of two
    variables (Kronecker deltas allowed); sums are contracted."""
    total = sp.Integer(0)
    y_free = set().union(*[(t.coef.free_symbols | t.var.free_symbols)
                           - {lm[0] for lm in t.limits} for t in y.terms])
    for t1 in x.terms:
        t1 = _apart(t1, y_free)
        used = set(t1.coef.free_symbols) | set(t1.var.free_symbols)
        used |= {lm[0] for lm in t1.limits}
        for t2 in y.terms:
            t2 = _apart(t2, used)
            c = cov(t1.var, t2.var)
            if c == 0:
                continue
            lims = t1.limits + t2.limits
            total += sp.Sum(t1.coef * t2.coef * c, *lims) if lims else t1.coef * t2.coef * c
    return sp.expand(contract(total))


def isserlis(forms: list[LinearForm], cov) -> sp.Expr:
    """`E[∏ forms]` for centred jointly Gaussian linear forms (Isserlis/Wick): the sum over
    perfect pairings of the products of covariances; 0 for an odd number."""
    if len(forms) % 2:
        return sp.Integer(0)
    if not forms:
        return sp.Integer(1)
    first, rest = forms[0], forms[1:]
    total = sp.Integer(0)
    for j, other in enumerate(rest):
        remaining = rest[:j] + rest[j + 1:]
        total += covariance(first, other, cov) * isserlis(remaining, cov)
    return sp.expand(total)


# -- chain rule through the attention weights ----------------------------------------------------

def chain_diff(e: sp.Expr, wrt: sp.Indexed, jac) -> sp.Expr:
    """`∂e/∂wrt` where `e` depends on `wrt` through the attention weights `A` (and possibly
    directly): `Σ_{h'ℓ'} ∂e/∂A_{h'ℓ'} · jac(h', ℓ')`, where `jac(h', ℓ')` is `∂A_{h'ℓ'}/∂wrt`."""
    avoid = set(e.free_symbols) | set(wrt.free_symbols)
    for sm in e.atoms(sp.Sum):
        avoid |= {lm[0] for lm in sm.limits}
    hh = fresh("head", avoid)
    ll = fresh("token", avoid | {hh})
    dA = sp.diff(e, A[hh, ll])
    direct = sp.diff(e, wrt) if not isinstance(wrt, sp.Indexed) or wrt.base != A else 0
    through = sp.Sum(dA * jac(hh, ll), lim(hh), lim(ll))
    return sp.expand(contract(through + direct))


def rename(e: sp.Basic, mapping: dict) -> sp.Basic:
    """Rename free indices simultaneously (safe for swaps like h ↔ k), first moving summation
    dummies out of the way of the new names."""
    new = set(mapping.values())

    def apart(sm: sp.Sum) -> sp.Basic:
        fn = apart_all(sm.function)
        ren: dict = {}
        for lm in sm.limits:
            if lm[0] in new:
                ren[lm[0]] = fresh(kind(lm[0]), new | sm.free_symbols | fn.free_symbols
                                   | set(ren.values()))
        return sp.Sum(fn.xreplace(ren), *[(ren.get(lm[0], lm[0]),) + tuple(lm[1:])
                                          for lm in sm.limits])

    def apart_all(x: sp.Basic) -> sp.Basic:
        return x.replace(lambda y: isinstance(y, sp.Sum), apart)

    e = apart_all(e)
    tmp = {old: sp.Dummy() for old in mapping}
    return e.xreplace(tmp).xreplace({tmp[old]: nw for old, nw in mapping.items()})


# -- checking identities -------------------------------------------------------------------------

SYMMETRIC = {s, q}
"""Tensors symmetric in their first two indices (extended by the derivation's named ones)."""

CHECK_SIZES = ((2, 3, 2),)
"""`(H, L, F)` at which index-notation identities are verified entry by entry."""


def _index_key(i):
    return (0, int(i), "") if i.is_Integer else (1, 0, i.name)


def symmetrize(e: sp.Basic) -> sp.Basic:
    """Order the first two indices of symmetric tensors (integers by value, symbols by name)."""
    def do(x):
        i, j, *rest = x.indices
        if _index_key(i) > _index_key(j):
            return x.base[(j, i, *rest)]
        return x
    return e.replace(lambda x: isinstance(x, sp.Indexed) and x.base in SYMMETRIC
                     and len(x.indices) >= 2, do)


def instantiate(e: sp.Basic, sizes: tuple[int, int, int], values: dict | None = None, *,
                expand: bool = True) -> sp.Basic:
    """`e` at `(H, L, F)` = `sizes` with the free indices set by `values`: every sum written
    out, deltas evaluated, symmetric tensors ordered (and the result expanded, for identity
    checks; code generation keeps the factored form)."""
    Hn, Ln, Fn = sizes
    e = e.xreplace({H: Hn, L: Ln, F: Fn})
    if values:
        e = rename_values(e, values)
    e = symmetrize(e.doit())
    return sp.expand(e) if expand else e


def rename_values(e: sp.Basic, values: dict) -> sp.Basic:
    """Substitute integers for free indices (summation dummies are left alone)."""
    return e.xreplace({sym: sp.Integer(v) for sym, v in values.items()}) if not any(
        isinstance(x, sp.Sum) and {lm[0] for lm in x.limits} & set(values)
        for x in e.atoms(sp.Sum)) else _avoid_capture(e, set(values)).xreplace(
            {sym: sp.Integer(v) for sym, v in values.items()})


def free_indices(e: sp.Basic) -> list:
    """Free integer indices of `e`, sorted by name."""
    idx = set()
    for x in e.atoms(sp.Indexed):
        idx |= {i for i in x.indices if isinstance(i, sp.Symbol)}
    idx |= {i for d in e.atoms(sp.KroneckerDelta) for i in d.args if isinstance(i, sp.Symbol)}
    return sorted(idx & e.free_symbols, key=lambda x: x.name)


def tidy(e: sp.Basic, *, pretty: bool = False) -> sp.Basic:
    """A normal form for display and structural comparison: deltas contracted, sums
    distributed, dummies renamed canonically, symmetric tensors' indices ordered, like terms
    collected."""
    e = canonical(pull_constants(sp.expand(contract(e))), pretty=pretty)
    return sp.expand(pull_constants(symmetrize(e)))


def vanishes(e: sp.Basic, sizes=CHECK_SIZES) -> bool:
    """Is `e` identically zero at each `(H, L, F)` of `sizes`, for all values of its free
    indices? (Exact polynomial identity in the remaining symbols.)"""
    free = free_indices(e)
    for sz in sizes:
        ranges = [range(1, upper_at(kind(i), sz) + 1) for i in free]
        for vals in itertools.product(*ranges):
            if instantiate(e, sz, dict(zip(free, vals))) != 0:
                return False
    return True


def upper_at(kd: str, sizes: tuple[int, int, int]) -> int:
    Hn, Ln, Fn = sizes
    return {"head": Hn, "token": Ln, "feature": Fn}[kd]
