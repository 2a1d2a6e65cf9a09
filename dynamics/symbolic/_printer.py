"""A JAX code printer for index-notation expressions: every term of a sum becomes one
`jnp.einsum` over its factors (summation dummies contracted, free indices kept), so the
generated code is vectorized over heads, tokens and features instead of unrolled entry by
entry.

Scalar sub-expressions (coefficients, `e^{−M}`, ...) are printed with sympy's `JaxPrinter`.
"""

from __future__ import annotations

import string

import jax.numpy as jnp
import sympy as sp
from sympy.printing.numpy import JaxPrinter

from ._algebra import kind


def bcast(x, src: str, dst: str, shape: tuple[int, ...]):
    """Runtime helper of the generated code: the array `x` with axes `src` (letters) as an
    array with axes `dst` (a superset), transposed and broadcast to `shape`."""
    x = jnp.asarray(x)
    present = [c for c in dst if c in src]
    perm = [src.index(c) for c in present]
    if perm != sorted(perm):
        x = jnp.transpose(x, perm)
    x = x.reshape(tuple(shape[i] if c in src else 1 for i, c in enumerate(dst)))
    return jnp.broadcast_to(x, shape)


class TensorPrinter:
    """Prints sympy index expressions as JAX array code.

    **Arguments:** `sizes` (`{"head": H, "token": L, "feature": F}`), `arrays`
    (`{IndexedBase: code name}`) and `scalars` (`{Symbol: code name}`).
    """

    def __init__(self, sizes: dict, arrays: dict, scalars: dict):
        self.sizes = sizes
        self.arrays = arrays
        self.scalars = scalars
        self._scalar_printer = JaxPrinter({"fully_qualified_modules": False})
        self._letters: dict = {}

    # -- helpers -------------------------------------------------------------------------------
    def letter(self, i: sp.Symbol) -> str:
        if i not in self._letters:
            self._letters[i] = string.ascii_letters[len(self._letters)]
        return self._letters[i]

    def size(self, i: sp.Symbol) -> int:
        return self.sizes[kind(i)]

    def shape(self, axes) -> tuple[int, ...]:
        return tuple(self.size(i) for i in axes)

    def align(self, code: str, src: tuple, dst: tuple) -> str:
        if tuple(src) == tuple(dst):
            return code
        s = "".join(self.letter(i) for i in src)
        d = "".join(self.letter(i) for i in dst)
        return f'bcast({code}, "{s}", "{d}", {self.shape(dst)})'

    def scalar(self, e: sp.Expr) -> str:
        e = e.xreplace({sym: sp.Symbol(name) for sym, name in self.scalars.items()})
        code = self._scalar_printer.doprint(e)
        return code.replace("numpy.", "jnp.")

    # -- the printer ---------------------------------------------------------------------------
    def statement(self, e: sp.Expr, axes: tuple) -> str:
        """Code for `e` as an array with the free indices `axes`, in that order."""
        code, src = self.code(e)
        missing = set(src) - set(axes)
        if missing:
            raise ValueError(f"free indices {missing} of {e} are not in the target {axes}")
        if not src and axes:
            return f"jnp.broadcast_to({code}, {self.shape(axes)})"
        return self.align(code, src, tuple(axes))

    def code(self, e: sp.Expr) -> tuple[str, tuple]:
        """`(code, axes)`: the array code of `e` and its axes (free indices, in order)."""
        if not _has_index(e):
            return "(" + self.scalar(e) + ")", ()
        if isinstance(e, sp.Add):
            parts = [self.code(t) for t in e.args]
            axes = _union(ax for _, ax in parts)
            return "(" + " + ".join(self.align(c, ax, axes) if ax else c
                                    for c, ax in parts) + ")", axes
        if isinstance(e, (sp.Mul, sp.Indexed, sp.KroneckerDelta, sp.Sum)) or (
                isinstance(e, sp.Pow) and e.exp.is_Integer and e.exp > 0):
            return self.contraction(e, ())
        if isinstance(e, sp.Pow):
            c, ax = self.code(e.base)
            return f"({c}) ** ({self.scalar(e.exp)})", ax
        if isinstance(e, (sp.exp, sp.log)):
            c, ax = self.code(e.args[0])
            return f"jnp.{type(e).__name__}({c})", ax
        raise NotImplementedError(f"no array code for {type(e).__name__}: {e}")

    def contraction(self, e: sp.Expr, dummies: tuple) -> tuple[str, tuple]:
        """A product (possibly under sums over `dummies`) as one `einsum`."""
        if isinstance(e, sp.Sum):
            inner = e.function
            dums = dummies + tuple(lm[0] for lm in e.limits)
            if isinstance(inner, sp.Add):
                return self.code(sp.Add(*[sp.Sum(t, *e.limits) for t in inner.args]))
            mult = sp.Mul(*[lm[2] - lm[1] + 1 for lm in e.limits
                            if lm[0] not in inner.free_symbols])
            code, ax = self.contraction(inner, dums)
            return (code if mult == 1 else f"{self.scalar(mult)} * {code}"), ax
        scal, ops = [], []
        for fac in sp.Mul.make_args(e):
            if not _has_index(fac):
                scal.append(fac)
            elif isinstance(fac, sp.Pow) and fac.exp.is_Integer and fac.exp > 0:
                ops += [self.operand(fac.base)] * int(fac.exp)
            else:
                ops.append(self.operand(fac))
        all_axes = _union(ax for _, ax in ops)
        out = tuple(i for i in all_axes if i not in dummies)
        spec = ",".join("".join(self.letter(i) for i in ax) for _, ax in ops)
        spec += "->" + "".join(self.letter(i) for i in out)
        if len(ops) == 1 and ops[0][1] == out:
            code = ops[0][0]
        else:
            code = f'jnp.einsum("{spec}", ' + ", ".join(c for c, _ in ops) + ")"
        if scal:
            code = f"{self.scalar(sp.Mul(*scal))} * {code}"
        return code, out

    def operand(self, e: sp.Expr) -> tuple[str, tuple]:
        if isinstance(e, sp.Indexed):
            name = self.arrays[e.base]
            sym = [i for i in e.indices if isinstance(i, sp.Symbol)]
            if len(set(sym)) != len(sym):
                raise NotImplementedError(f"repeated index in {e}")
            if len(sym) == len(e.indices):
                return name, tuple(sym)
            sl = ", ".join(":" if isinstance(i, sp.Symbol) else str(int(i) - 1)
                           for i in e.indices)
            return f"{name}[{sl}]", tuple(sym)
        if isinstance(e, sp.KroneckerDelta):
            i, j = e.args
            if isinstance(i, sp.Symbol) and isinstance(j, sp.Symbol):
                return f"jnp.eye({self.size(i)})", (i, j)
            sym, c = (i, j) if isinstance(i, sp.Symbol) else (j, i)
            return f"jnp.eye({self.size(sym)})[{int(c) - 1}]", (sym,)
        return self.code(e)


def _has_index(e: sp.Expr) -> bool:
    return bool(e.atoms(sp.Indexed)) or bool(e.atoms(sp.KroneckerDelta))


def _union(axes_iter) -> tuple:
    out = []
    for ax in axes_iter:
        for i in ax:
            if i not in out:
                out.append(i)
    return tuple(out)
