"""Code generation: the derived system, written out for given `(activation, H, L, F)` and
turned into JAX functions with `sympy.lambdify`.

Two functions per case, cached in-process:

- `integrands(chi, chi_star, b, n, s, rho, noise)`: the per-node integrands of the named
  expectations (`a, C, T^m, T^q, g^b` and, with SGD noise, `N^k, N^v`) at one draw of the key
  fields. The code is staged like the derivation: `A` (the activation's definition, evaluated
  with max subtraction), `u = ∂(½e²)/∂A`, `e²`, `Ĝ`, `ĝ^b`, `Γ`, then the integrands, with
  sympy's common-subexpression elimination inside each stage.
- `rhs(E, m, q, n, s, b, eta, eta_b, wd, batch, rho)`: the ODE assembled from the expectations.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable

import jax.numpy as jnp
import sympy as sp

from ._activations import symbolic_activation
from ._algebra import (A, B, Delta, b, chi, chis, e2, eta, eta_b, instantiate, kind, m, n, q,
                       rho, s, u, wd)
from ._algebra import ell as ell_
from ._algebra import h as h_
from ._derive import Gam, Ghat, Nk, Nv, Tm, Tq, a_, C_, gb_, gbh, manifold_ode

_NAMES = {chi: "chi", chis: "chis", b: "b", n: "n", s: "s", m: "m", q: "q", A: "A", u: "u",
          Ghat: "G", gbh: "gb_node", Gam: "Gam", a_: "a", C_: "C", Tm: "Tm", Tq: "Tq",
          gb_: "gb", Nk: "Nk", Nv: "Nv"}
_SCALARS = {rho: "rho", Delta: "Delta", e2: "e2", eta: "eta", eta_b: "eta_b", wd: "wd",
            B: "batch"}

INTEGRANDS = ("a", "C", "Tm", "Tq", "gb", "Nk", "Nv")
"""Names of the per-node integrands (code names of `a, C, T^m, T^q, g^b, N^k, N^v`)."""


def _sym(x: sp.Indexed) -> sp.Symbol:
    name = _NAMES.get(x.base, str(x.base.label))
    return sp.Symbol(name + "_" + "_".join(str(i) for i in x.indices), real=True)


def _scalarize(e: sp.Expr) -> sp.Expr:
    """Indexed entries and named scalars → plain real symbols (code variables)."""
    rep = {x: _sym(x) for x in e.atoms(sp.Indexed)}
    rep.update({sym: sp.Symbol(name, real=True) for sym, name in _SCALARS.items()})
    return e.xreplace(rep)


def _grid(base: sp.IndexedBase, *dims: int) -> list:
    """Nested list of the scalar symbols `base[1..d1, 1..d2, ...]` (the lambdify argument
    layout of an array)."""
    if not dims:
        return _sym(base[()])
    if len(dims) == 1:
        return [_sym(base[i]) for i in range(1, dims[0] + 1)]
    return [_grid_row(base, (i,), dims[1:]) for i in range(1, dims[0] + 1)]


def _grid_row(base, prefix, dims):
    if len(dims) == 1:
        return [_sym(base[prefix + (i,)]) for i in range(1, dims[0] + 1)]
    return [_grid_row(base, prefix + (i,), dims[1:]) for i in range(1, dims[0] + 1)]


def _entries(lhs: sp.Expr, rhs: sp.Expr, sizes: tuple[int, int, int]) -> list:
    """`[(code symbol, expression)]` for every entry of the index equation `lhs = rhs`."""
    free = [i for i in (lhs.indices if isinstance(lhs, sp.Indexed) else ())]
    Hn, Ln, Fn = sizes
    up = {"head": Hn, "token": Ln, "feature": Fn}
    out = []
    for vals in itertools.product(*[range(1, up[kind(i)] + 1) for i in free]):
        val = dict(zip(free, vals))
        left = lhs.xreplace({i: sp.Integer(v) for i, v in val.items()}) if free else lhs
        out.append((_scalarize(left), _scalarize(instantiate(rhs, sizes, val, expand=False))))
    return out


def stable_attention(activation: str, sizes: tuple[int, int, int]) -> list:
    """`[(A_hl, expression)]` from the activation's definition, each ratio multiplied through by
    `e^{−M}` with `M` the largest exponent in it (and 0 when the normalizer has a constant,
    softmax-1's "1"): the same function, without overflow."""
    act = symbolic_activation(activation)
    out, maxima = [], {}
    for lhs, e in _entries(A[h_, ell_], act.definition(h_, ell_), sizes):
        num, den = sp.fraction(sp.together(e))
        args = sorted({x.args[0] for x in (num + den).atoms(sp.exp)}, key=sp.default_sort_key)
        if any(not t.has(sp.exp) for t in sp.Add.make_args(sp.expand(den))):
            args = [sp.Integer(0)] + args
        key = tuple(args)
        if key not in maxima:
            maxima[key] = sp.Symbol(f"M_{len(maxima)}", real=True)
        M = maxima[key]

        def shift(x):
            return sp.expand(sp.powsimp(sp.expand(x * sp.exp(-M)), combine="exp"))

        out.append((lhs, shift(num) / shift(den)))
    return [(M, sp.Max(*key)) for key, M in maxima.items()] + out


@dataclasses.dataclass(frozen=True)
class Generated:
    """The generated functions of one `(activation, H, L, F, sgd_noise)` case, with their
    Python source (for inspection)."""

    integrands: Callable
    rhs: Callable
    integrands_source: str
    rhs_source: str
    n_operations: int


def _cse(assignments: list) -> Callable:
    """A `cse` callable for lambdify: emit the staged `assignments` first (each stage reduced
    by sympy's CSE), then reduce the outputs."""

    def run(exprs):
        counter = itertools.count()
        out = []
        for stage in assignments:
            syms = [lhs for lhs, _ in stage]
            repl, red = sp.cse([rhs for _, rhs in stage],
                               symbols=(sp.Symbol(f"x{next(counter)}") for _ in itertools.count()))
            out += repl + list(zip(syms, red))
        repl, red = sp.cse(exprs, symbols=(sp.Symbol(f"x{next(counter)}")
                                           for _ in itertools.count()))
        return out + repl, red

    return run


@functools.cache
def generate(activation: str, H_: int, L_: int, F_: int, sgd_noise: bool = True) -> Generated:
    """Generate (once per process) the JAX functions of the reduced ODE for one case.

    **Arguments:** the activation's name, the sizes `H, L, F`, and whether the `η²` terms are
    kept. **Returns:** a [`Generated`][].
    """
    import inspect

    M = manifold_ode(activation)
    sizes = (H_, L_, F_)
    st = M.stages
    att = stable_attention(activation, sizes)
    maxima = [x for x in att if not isinstance(x[1], sp.Basic) or x[1].func == sp.Max]
    stages = [maxima, [x for x in att if x not in maxima], _entries(*st["u"], sizes),
              _entries(*st["e2"], sizes), _entries(*st["Ghat"], sizes),
              _entries(*st["gbh"], sizes)]
    if sgd_noise:
        stages.append(_entries(*st["Gamma"], sizes))
    outputs = {}
    for name, code in zip(("a", "C", "T^m", "T^q", "g^b", "N^k", "N^v"), INTEGRANDS):
        if code in ("Nk", "Nv") and not sgd_noise:
            continue
        lhs, integrand = M.integrands[name]
        outputs[code] = [rhs for _, rhs in _entries(lhs, integrand, sizes)]
    shapes = {"a": (H_,), "C": (H_, H_), "Tm": (H_, F_), "Tq": (H_, H_), "gb": (H_,),
              "Nk": (H_, H_), "Nv": (H_, H_)}
    flat = [e for code in outputs for e in outputs[code]]
    args = [_grid(chi, H_, L_), _grid(chis, F_, L_), _grid(b, H_), _grid(n, H_),
            _grid(s, H_, H_), sp.Symbol("rho", real=True), sp.Symbol("Delta", real=True)]
    fn = sp.lambdify(args, flat, modules="jax", cse=_cse(stages), docstring_limit=0)
    n_ops = sum(sp.count_ops(rhs) for stage in stages for _, rhs in stage) + sum(
        sp.count_ops(e) for e in flat)

    def integrands(chi_, chis_, b_, n_, s_, rho_, delta_):
        vals = fn(chi_, chis_, b_, n_, s_, rho_, delta_)
        out, i = {}, 0
        for code in outputs:
            size = len(outputs[code])
            arr = jnp.stack([jnp.asarray(v, dtype=jnp.result_type(chi_)) for v in vals[i:i + size]])
            out[code] = arr.reshape(shapes[code])
            i += size
        return out

    # the assembly: d(state)/dt from the named expectations
    rhs_exprs, rhs_shapes = {}, {}
    for name, (lhs, e) in M.rhs.items():
        if not sgd_noise:
            e = e.xreplace({Nk: 0, Nv: 0}).replace(
                lambda x: isinstance(x, sp.Indexed) and x.base in (Nk, Nv), lambda x: 0)
        target = lhs.args[0] if isinstance(lhs, sp.Derivative) else lhs
        ent = _entries(target, e, sizes)
        rhs_exprs[name] = [r for _, r in ent]
        rhs_shapes[name] = _shape_of(target, sizes)
    names = list(rhs_exprs)
    flat_rhs = [e for nm in names for e in rhs_exprs[nm]]
    e_args = [_grid(a_, H_), _grid(C_, H_, H_), _grid(Tm, H_, F_), _grid(Tq, H_, H_),
              _grid(gb_, H_)]
    if sgd_noise:
        e_args += [_grid(Nk, H_, H_), _grid(Nv, H_, H_)]
    state_args = [_grid(m, H_, F_), _grid(q, H_, H_), _grid(n, H_), _grid(s, H_, H_),
                  _grid(b, H_)]
    hyper_args = [sp.Symbol(x, real=True) for x in ("eta", "eta_b", "wd", "batch", "rho")]
    rfn = sp.lambdify(e_args + state_args + hyper_args, flat_rhs, modules="jax", cse=True,
                      docstring_limit=0)

    def rhs(E: dict, m_, q_, n_, s_, b_, eta_, eta_b_, wd_, batch_, rho_) -> dict:
        ex = [E[c] for c in INTEGRANDS if c in outputs]
        vals = rfn(*ex, m_, q_, n_, s_, b_, eta_, eta_b_, wd_, batch_, rho_)
        out, i = {}, 0
        dtype = jnp.result_type(m_)
        for nm in names:
            size = len(rhs_exprs[nm])
            arr = jnp.stack([jnp.asarray(v, dtype=dtype) * jnp.ones((), dtype)
                             for v in vals[i:i + size]])
            out[nm] = arr.reshape(rhs_shapes[nm])
            i += size
        return out

    return Generated(integrands=integrands, rhs=rhs, integrands_source=inspect.getsource(fn),
                     rhs_source=inspect.getsource(rfn), n_operations=int(n_ops))


def _shape_of(x: sp.Expr, sizes) -> tuple[int, ...]:
    Hn, Ln, Fn = sizes
    if not isinstance(x, sp.Indexed):
        return ()
    up = {"head": Hn, "token": Ln, "feature": Fn}
    return tuple(up[kind(i)] for i in x.indices)
