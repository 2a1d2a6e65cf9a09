"""Code generation: the derived system, written out for given `(activation, H, L, F)` as JAX
functions.

Two functions per case, cached in-process ([`generate`][]):

- `integrands(chi, chis, b, n, s, rho, Delta)`: the per-node integrands of the named
  expectations (`a, C, T^m, T^q, g^b` and, with SGD noise, `N^k, N^v`) at one draw of the key
  fields, staged like the derivation: `A` (the activation's definition, evaluated with max
  subtraction), `u = ∂(½e²)/∂A`, `e²`, `Ĝ`, `ĝ^b`, `Γ`, then the integrands;
- `rhs(a, C, Tm, Tq, gb, [Nk, Nv,] m, q, n, s, b, eta, eta_b, wd, batch, rho)`: the ODE
  assembled from the expectations.

Two code styles:

- `"einsum"` (default): [`TensorPrinter`][] prints each index expression as array code, one
  `jnp.einsum` per term; the code size does not grow with H, L, F.
- `"scalar"`: every entry written out and passed to `sympy.lambdify` (JAX module) with sympy's
  common-subexpression elimination. Its size grows like `H⁴L²` (Bayes-softmax noise term); kept
  as an independent second code generator for cross-checks on small cases.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import itertools
import linecache
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import sympy as sp

from .._exported import file_digest
from .._source_cache import source_cache
from ..activations import activation_class
from ._activations import symbolic_activation
from ._algebra import (A, B, Delta, F, H, L, b, chi, chis, e2, ell, eta, eta_b, h, instantiate,
                       kind, m, n, q, rho, s, u, wd)
from ._derive import C_, Gam, Ghat, Manifold, Nk, Nv, Tm, Tq, a_, gb_, gbh, manifold_ode
from ._printer import TensorPrinter, bcast

INTEGRANDS = ("a", "C", "Tm", "Tq", "gb", "Nk", "Nv")
"""Code names of the per-node integrands `a, C, T^m, T^q, g^b, N^k, N^v`."""

_INTEGRAND_OF = dict(zip(INTEGRANDS, ("a", "C", "T^m", "T^q", "g^b", "N^k", "N^v")))
_STATE = ("m", "q", "n", "s", "b", "kv", "kvs", "vks")
_ARRAYS = {chi: "chi", chis: "chis", b: "b", n: "n", s: "s", m: "m", q: "q", A: "A", u: "u",
           Ghat: "G", gbh: "gb_node", Gam: "Gam", a_: "a", C_: "C", Tm: "Tm", Tq: "Tq",
           gb_: "gb", Nk: "Nk", Nv: "Nv"}
_SCALARS = {rho: "rho", Delta: "Delta", e2: "e2", eta: "eta", eta_b: "eta_b", wd: "wd",
            B: "batch"}
_M = sp.IndexedBase("M")
_Ms = sp.Symbol("M")


@dataclasses.dataclass(frozen=True)
class Generated:
    """The generated functions of one `(activation, H, L, F, sgd_noise, style)` case and their
    Python source."""

    integrands: Callable
    rhs: Callable
    integrands_source: str
    rhs_source: str
    style: str


def _sized(e: sp.Basic, sizes: tuple[int, int, int]) -> sp.Basic:
    return e.xreplace(dict(zip((H, L, F), sizes)))


def _compile(source: str, name: str, tag: str) -> Callable:
    """`exec` generated source (registered with linecache, so tracebacks show it)."""
    filename = f"<headflow-symbolic-{tag}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"jnp": jnp, "jax": jax, "bcast": bcast}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


def _attention_lines(activation: str, tp: TensorPrinter, sizes) -> list[str]:
    """`A = σ(χ + b)` from the definition `num/N` with `num = e^U`, `N = c + Σ e^V`: each ratio
    multiplied through by `e^{−M}`, `M` the largest exponent in its normalizer (and 0 when
    `c ≠ 0`), a constant for the ratio, so the value is the same and nothing overflows."""
    act = symbolic_activation(activation)
    num, den = act.numerator(h, ell), _sized(act.normalizer(h), sizes)
    sums = [t for t in sp.Add.make_args(den) if isinstance(t, sp.Sum)]
    const = sp.Add(*[t for t in sp.Add.make_args(den) if not isinstance(t, sp.Sum)])
    if not (isinstance(num, sp.exp) and len(sums) == 1 and isinstance(sums[0].function, sp.exp)
            and not const.free_symbols):
        # not an exponential ratio: print the definition as it is
        return [f"    A = {tp.statement(_sized(act.definition(h, ell), sizes), (h, ell))}"]
    (sm,) = sums
    dummies = tuple(lm[0] for lm in sm.limits)
    V = sm.function.args[0]
    free = tuple(i for i in (h,) if i in V.free_symbols)
    axes = free + dummies
    Mx = _M[free] if free else _Ms
    lines = []
    vcode = tp.statement(V, axes)
    red = tuple(range(len(free), len(axes)))
    mcode = f"jnp.max({vcode}, axis={red})"
    if const != 0:
        mcode = f"jnp.maximum({mcode}, 0.0)"
    lines.append(f"    M = jax.lax.stop_gradient({mcode})")
    stable = sp.exp(num.args[0] - Mx) / (const * sp.exp(-Mx)
                                          + sp.Sum(sp.exp(V - Mx), *sm.limits))
    tp.arrays[_M] = "M"
    tp.scalars[_Ms] = "M"
    lines.append(f"    A = {tp.statement(stable, (h, ell))}")
    return lines


def _einsum_source(activation, sizes, sgd_noise, M) -> tuple[str, str]:
    Hn, Ln, Fn = sizes
    tp = TensorPrinter({"head": Hn, "token": Ln, "feature": Fn}, dict(_ARRAYS), dict(_SCALARS))
    st = M.stages
    lines = ['def integrands(chi, chis, b, n, s, rho, Delta):',
             f'    """Per-node integrands, {activation}, H={Hn}, L={Ln}, F={Fn} (generated by '
             'headflow.dynamics.symbolic; see docs/equations.md)."""']
    lines += _attention_lines(activation, tp, sizes)
    order = ["u", "e2", "Ghat", "gbh"] + (["Gamma"] if sgd_noise else [])
    for name in order:
        lhs, rhs = st[name]
        target = tp.arrays.get(getattr(lhs, "base", None)) or tp.scalars[lhs]
        axes = tuple(lhs.indices) if isinstance(lhs, sp.Indexed) else ()
        lines.append(f"    {target} = {tp.statement(_sized(rhs, sizes), axes)}")
    outs = [c for c in INTEGRANDS if sgd_noise or c not in ("Nk", "Nv")]
    for c in outs:
        lhs, integrand = M.integrands[_INTEGRAND_OF[c]]
        lines.append(f"    {c} = {tp.statement(_sized(integrand, sizes), tuple(lhs.indices))}")
    lines.append("    return {" + ", ".join(f'"{c}": {c}' for c in outs) + "}")
    integrands_src = "\n".join(lines) + "\n"

    tp = TensorPrinter({"head": Hn, "token": Ln, "feature": Fn}, dict(_ARRAYS), dict(_SCALARS))
    args = ", ".join(outs + ["m", "q", "n", "s", "b", "eta", "eta_b", "wd", "batch", "rho"])
    lines = [f"def rhs({args}):",
             f'    """d(overlaps)/dt from the expectations, H={Hn}, F={Fn} (generated by '
             'headflow.dynamics.symbolic)."""']
    for name in _STATE:
        lhs, e = M.rhs[name]
        target = lhs.args[0]
        axes = tuple(target.indices) if isinstance(target, sp.Indexed) else ()
        if not sgd_noise:
            e = e.replace(lambda x: isinstance(x, sp.Indexed) and x.base in (Nk, Nv),
                          lambda x: sp.Integer(0))
        e = _sized(e, sizes)
        code = (tp.statement(e, axes) if e != 0 else
                f"jnp.zeros({tuple(tp.size(i) for i in axes)}, m.dtype)")
        lines.append(f"    d{name} = {code}")
    lines.append("    return {" + ", ".join(f'"{nm}": d{nm}' for nm in _STATE) + "}")
    return integrands_src, "\n".join(lines) + "\n"


@functools.cache
def _code_digest(cls: type) -> str | None:
    """A hash of the code a derivation comes from: the activation's class `cls` and this
    package's modules, read once per class and process (None for a class without source, e.g.
    one defined interactively: no cache)."""
    try:
        parts = [inspect.getsource(cls)]
    except (OSError, TypeError):
        return None
    here = Path(__file__).resolve().parent
    parts += [file_digest(str(f)) for f in sorted(here.glob("*.py"))]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


class _SourceCache:
    """Generated source kept on disk between processes (the derivation takes seconds), keyed
    by the case and by a hash of the derivation's own code and of the activation's class, so a
    change to either regenerates it. Beside the source of each case (sizes, options), the
    derivation itself ([`manifold_ode`][headflow.dynamics.symbolic.manifold_ode]: the same for
    every case of an activation) is kept, so that a new case of an activation derived before
    only generates its code. Off until [`headflow.dynamics.set_source_cache`][] gives it a
    folder."""

    def _path(self, activation: str, tag: str, suffix: str = ".json") -> Path | None:
        folder = source_cache()
        if folder is None:
            return None
        code = _code_digest(activation_class(activation))
        if code is None:
            return None
        digest = hashlib.sha256(f"{tag}\0{code}".encode()).hexdigest()[:24]
        return folder / f"{tag}-{digest}{suffix}"

    def load(self, activation: str, tag: str) -> tuple[str, str] | None:
        raw = self._read(self._path(activation, tag))
        try:
            data = json.loads(raw) if raw is not None else None
            return None if data is None else (data["integrands"], data["rhs"])
        except (ValueError, KeyError, TypeError):
            return None

    def store(self, activation: str, tag: str, sources: tuple[str, str]) -> None:
        self._write(self._path(activation, tag),
                    json.dumps({"integrands": sources[0], "rhs": sources[1]}).encode())

    def load_manifold(self, activation: str) -> Manifold | None:
        raw = self._read(self._manifold_path(activation))
        try:
            manifold = pickle.loads(raw) if raw is not None else None
        except Exception:       # noqa: BLE001 - unreadable or stale in any way: derive again
            return None
        return manifold if isinstance(manifold, Manifold) else None

    def store_manifold(self, activation: str, manifold: Manifold) -> None:
        self._write(self._manifold_path(activation), pickle.dumps(manifold))

    def _manifold_path(self, activation: str) -> Path | None:
        # sympy's objects are pickled: another sympy version derives again
        return self._path(activation, f"{activation}-manifold-sympy{sp.__version__}", ".pickle")

    @staticmethod
    def _read(path: Path | None) -> bytes | None:
        if path is None or not path.is_file():
            return None
        try:
            return path.read_bytes()
        except OSError:
            return None

    @staticmethod
    def _write(path: Path | None, data: bytes) -> None:
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        except OSError:                          # a read-only cache is only slower
            pass


_SOURCE_CACHE = _SourceCache()


@functools.cache
def _derivation(activation: str) -> Manifold:
    """[`manifold_ode`][headflow.dynamics.symbolic.manifold_ode] of `activation`, read from the
    source cache when a process with the same code derived it before (and stored there
    otherwise)."""
    manifold = _SOURCE_CACHE.load_manifold(activation)
    if manifold is None:
        manifold = manifold_ode(activation)
        _SOURCE_CACHE.store_manifold(activation, manifold)
    return manifold


@functools.cache
def generate(activation: str, H_: int, L_: int, F_: int, sgd_noise: bool = True,
             style: str = "einsum") -> Generated:
    """Generate (once per process and case) the JAX functions of the reduced ODE.

    **Arguments:** the activation's name, the sizes `H, L, F`, whether the `η²` terms are kept,
    and the code `style` (`"einsum"` or `"scalar"`, see the module docs).

    **Returns:** a [`Generated`][].
    """
    sizes = (H_, L_, F_)
    tag = f"{activation}-{H_}-{L_}-{F_}-{int(sgd_noise)}-{style}"
    if style == "einsum":
        cached = _SOURCE_CACHE.load(activation, tag)
        if cached is None:
            cached = _einsum_source(activation, sizes, sgd_noise, _derivation(activation))
            _SOURCE_CACHE.store(activation, tag, cached)
        isrc, rsrc = cached
        ifn, rfn = _compile(isrc, "integrands", tag), _compile(rsrc, "rhs", tag + "-rhs")
        return Generated(integrands=ifn, rhs=rfn, integrands_source=isrc, rhs_source=rsrc,
                         style=style)
    if style == "scalar":
        return _scalar(activation, sizes, sgd_noise, _derivation(activation))
    raise ValueError(f"style must be 'einsum' or 'scalar', not {style!r}")


# -- the scalar (lambdify) style ----------------------------------------------------------------

def _sym(x: sp.Indexed) -> sp.Symbol:
    name = _ARRAYS.get(x.base, str(x.base.label))
    return sp.Symbol(name + "_" + "_".join(str(i) for i in x.indices), real=True)


def _scalarize(e: sp.Expr) -> sp.Expr:
    rep = {x: _sym(x) for x in e.atoms(sp.Indexed)}
    rep.update({sym: sp.Symbol(name, real=True) for sym, name in _SCALARS.items()})
    return e.xreplace(rep)


def _grid(base: sp.IndexedBase, *dims: int):
    """Nested list of the scalar symbols of `base` (lambdify's argument layout)."""
    if len(dims) == 1:
        return [_sym(base[i]) for i in range(1, dims[0] + 1)]
    return [[_sym(base[i, j]) for j in range(1, dims[1] + 1)] for i in range(1, dims[0] + 1)]


def _entries(lhs: sp.Expr, rhs: sp.Expr, sizes: tuple[int, int, int]) -> list:
    """`[(code symbol, expression)]` for every entry of `lhs = rhs`."""
    free = list(lhs.indices) if isinstance(lhs, sp.Indexed) else []
    up = dict(zip(("head", "token", "feature"), sizes))
    out = []
    for vals in itertools.product(*[range(1, up[kind(i)] + 1) for i in free]):
        val = dict(zip(free, vals))
        left = lhs.xreplace({i: sp.Integer(v) for i, v in val.items()})
        out.append((_scalarize(left), _scalarize(instantiate(rhs, sizes, val, expand=False))))
    return out


def _two(pair) -> tuple[sp.Expr, sp.Expr]:
    lhs, rhs = pair
    return lhs, rhs


def _stable_entries(activation: str, sizes) -> tuple[list, list]:
    """`([(M_i, max)], [(A_hl, ratio)])`: each ratio multiplied through by `e^{−M}`."""
    act = symbolic_activation(activation)
    out: list = []
    maxima: dict = {}
    for lhs, e in _entries(A[h, ell], act.definition(h, ell), sizes):
        num, den = sp.fraction(sp.together(e))
        args = sorted({x.args[0] for x in (num + den).atoms(sp.exp)}, key=sp.default_sort_key)
        if any(not t.has(sp.exp) for t in sp.Add.make_args(sp.expand(den))):
            args = [sp.Integer(0)] + args
        Mx = maxima.setdefault(tuple(args), sp.Symbol(f"M_{len(maxima)}", real=True))

        def shift(x):
            return sp.expand(sp.powsimp(sp.expand(x * sp.exp(-Mx)), combine="exp"))

        out.append((lhs, shift(num) / shift(den)))
    return [(Mx, sp.Max(*key)) for key, Mx in maxima.items()], out


def _staged_cse(stages: list) -> Callable:
    """A `cse` callable for lambdify: the staged assignments first (each reduced by sympy's
    CSE), then the reduced outputs."""

    def run(exprs):
        names = (sp.Symbol(f"x{i}") for i in itertools.count())
        out = []
        for stage in stages:
            repl, red = sp.cse([r for _, r in stage], symbols=names)
            out += repl + list(zip([lhs for lhs, _ in stage], red))
        repl, red = sp.cse(exprs, symbols=names)
        return out + repl, red

    return run


def _scalar(activation, sizes, sgd_noise, M) -> Generated:
    import inspect

    Hn, Ln, Fn = sizes
    st = M.stages
    maxima, att = _stable_entries(activation, sizes)
    stages = [maxima, att] + [_entries(*_two(st[nm]), sizes) for nm in ("u", "e2", "Ghat", "gbh")]
    if sgd_noise:
        stages.append(_entries(*_two(st["Gamma"]), sizes))
    outs = [c for c in INTEGRANDS if sgd_noise or c not in ("Nk", "Nv")]
    shapes = {"a": (Hn,), "C": (Hn, Hn), "Tm": (Hn, Fn), "Tq": (Hn, Hn), "gb": (Hn,),
              "Nk": (Hn, Hn), "Nv": (Hn, Hn)}
    flat = {c: [r for _, r in _entries(*_two(M.integrands[_INTEGRAND_OF[c]]), sizes)]
            for c in outs}
    args = [_grid(chi, Hn, Ln), _grid(chis, Fn, Ln), _grid(b, Hn), _grid(n, Hn),
            _grid(s, Hn, Hn), sp.Symbol("rho", real=True), sp.Symbol("Delta", real=True)]
    fn = sp.lambdify(args, [e for c in outs for e in flat[c]], modules="jax",
                     cse=_staged_cse(stages), docstring_limit=0)

    def unflatten(vals, groups, shape_of, dtype):
        out, i = {}, 0
        for c, size in groups:
            arr = jnp.stack([jnp.asarray(v, dtype) for v in vals[i:i + size]])
            out[c] = arr.reshape(shape_of[c])
            i += size
        return out

    def integrands(chi_, chis_, b_, n_, s_, rho_, delta_):
        vals = fn(chi_, chis_, b_, n_, s_, rho_, delta_)
        return unflatten(vals, [(c, len(flat[c])) for c in outs], shapes, jnp.result_type(chi_))

    rhs_flat, rhs_shapes = {}, {}
    for name in _STATE:
        lhs, e = M.rhs[name]
        if not sgd_noise:
            e = e.replace(lambda x: isinstance(x, sp.Indexed) and x.base in (Nk, Nv),
                          lambda x: sp.Integer(0))
        target = lhs.args[0]
        rhs_flat[name] = [r for _, r in _entries(target, e, sizes)]
        up = dict(zip(("head", "token", "feature"), sizes))
        rhs_shapes[name] = tuple(up[kind(i)] for i in getattr(target, "indices", ()))
    e_args = [_grid(a_, Hn), _grid(C_, Hn, Hn), _grid(Tm, Hn, Fn), _grid(Tq, Hn, Hn),
              _grid(gb_, Hn)] + ([_grid(Nk, Hn, Hn), _grid(Nv, Hn, Hn)] if sgd_noise else [])
    state_args = [_grid(m, Hn, Fn), _grid(q, Hn, Hn), _grid(n, Hn), _grid(s, Hn, Hn),
                  _grid(b, Hn)]
    hyper = [sp.Symbol(x, real=True) for x in ("eta", "eta_b", "wd", "batch", "rho")]
    rfn = sp.lambdify(e_args + state_args + hyper,
                      [e for nm in _STATE for e in rhs_flat[nm]], modules="jax", cse=True,
                      docstring_limit=0)

    def rhs(*a):
        vals = rfn(*a)
        dtype = jnp.result_type(a[len(outs)])
        vals = [jnp.asarray(v, dtype) * jnp.ones((), dtype) for v in vals]
        return unflatten(vals, [(nm, len(rhs_flat[nm])) for nm in _STATE], rhs_shapes, dtype)

    return Generated(integrands=integrands, rhs=rhs, integrands_source=inspect.getsource(fn),
                     rhs_source=inspect.getsource(rfn), style="scalar")
