"""Attention activations as sympy expressions, and their Jacobians derived from those
definitions.

Each activation is a ratio `A_{hℓ} = num(h, ℓ) / N_h` of a numerator per head and token and a
normalizer per head (the same for all heads for Bayes-softmax), written in index notation from
the logits `χ_{hℓ}` and biases `b_h` (`docs/model.md#the-student-attention-heads`). The
definition comes from the activation's own file (`AbstractActivation.symbolic`, given the
namespace [`SYMBOLS`][]); the Jacobians `∂A_{hℓ}/∂χ_{kp}` and `∂A_{hℓ}/∂b_k` are *derived*:
sympy differentiates `log A = log num − log N`, the sums over Kronecker deltas are contracted,
and the result is rewritten in terms of the weights themselves by substituting the definition
back (`num(x, y) = A_{xy} N`). [`derive_jacobians`][] checks that no logit survives, i.e. that
the Jacobian closes on A.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Callable

import sympy as sp

from .._errors import ConfigError
from ..activations import activation_class, activation_names
from ._algebra import A, H, L, b, chi, contract, ell, fresh, h, k, p, rename

_Z = sp.Symbol("N")  # the normalizer, while it is being eliminated

_T = fresh("token", {h, k, ell, p})   # ℓ', the normalizer's dummies
_HD = fresh("head", {h, k})           # h'
_UPPER = {"token": (_T, L), "head": (_HD, H)}


def _sum(fn: Callable[..., sp.Expr], over: tuple[str, ...]) -> sp.Expr:
    """`Σ fn(i, …)` over fresh dummies of the kinds `over` (one sympy `Sum`, inner kind last)."""
    dummies = [_UPPER[kd] for kd in over]
    limits = [(d, 1, up) for d, up in reversed(dummies)]
    return sp.Sum(fn(*(d for d, _ in dummies)), *limits)


SYMBOLS = types.SimpleNamespace(chi=chi, b=b, H=H, L=L, exp=sp.exp, sum=_sum)
"""What an activation's `symbolic(s)` builds its definition from (`s.chi[h, ℓ]`, `s.b[h]`,
`s.exp`, `s.sum(fn, over=("token",))` or `over=("head", "token")`)."""


@dataclasses.dataclass(frozen=True)
class SymbolicActivation:
    """`A_{hℓ} = numerator(h, ℓ) / normalizer(h)` in index notation.

    **Fields:** `name` (as in the config), `numerator(h, ℓ)`, `normalizer(h)` (sympy expressions
    in `χ`, `b`), `latex` (the definition as shown in `docs/equations.md`).
    """

    name: str
    numerator: Callable[[sp.Expr, sp.Expr], sp.Expr]
    normalizer: Callable[[sp.Expr], sp.Expr]
    latex: str

    def definition(self, hh=h, ll=ell) -> sp.Expr:
        return self.numerator(hh, ll) / self.normalizer(hh)


def symbolic_names() -> tuple[str, ...]:
    """The registered activations that have a symbolic definition, in registration order."""
    return tuple(n for n in activation_names()
                 if activation_class(n).symbolic(SYMBOLS) is not None)


def symbolic_activation(name: str) -> SymbolicActivation:
    """The symbolic definition of the activation `name`, or a one-line error."""
    definition = (activation_class(name).symbolic(SYMBOLS) if name in activation_names()
                  else None)
    if definition is None:
        raise ConfigError(
            f"ode.rhs = 'symbolic': activation {name!r} has no symbolic definition (those with "
            f"one: {', '.join(symbolic_names())}); give its class a `symbolic` method or use "
            "ode.rhs = 'autodiff'")
    return SymbolicActivation(name, definition.numerator, definition.normalizer,
                              definition.latex)


def _close_on_A(act: SymbolicActivation, expr: sp.Expr) -> sp.Expr:
    """Rewrite a derivative of `log A_{hℓ}` in terms of the weights `A`: the normalizer becomes
    the symbol N, every numerator `num(x, y)` becomes `A_{xy} N`, and N cancels."""
    expr = expr.xreplace({act.normalizer(h): _Z})
    X, Y = sp.Wild("X"), sp.Wild("Y")
    expr = expr.replace(act.numerator(X, Y), A[X, Y] * _Z)
    expr = contract(expr)
    # move N into the remaining sums and cancel it
    expr = expr.replace(lambda e: isinstance(e, sp.Sum),
                        lambda e: sp.Sum(sp.expand(e.function / _Z), *e.limits) * _Z)
    return sp.expand(sp.cancel(sp.expand(expr)))


@functools.cache
def derive_jacobians(name: str) -> tuple[sp.Expr, sp.Expr]:
    """`(∂A_{hℓ}/∂χ_{kp}, ∂A_{hℓ}/∂b_k)` in index notation, in terms of A only.

    **Arguments:** `name` of the activation. **Returns:** two sympy expressions with free
    indices `h, ℓ, k, p` and `h, ℓ, k`.
    """
    act = symbolic_activation(name)
    log_a = sp.expand_log(sp.log(act.numerator(h, ell)), force=True) - sp.log(act.normalizer(h))
    out = []
    for wrt in (chi[k, p], b[k]):
        dlog = sp.diff(log_a, wrt)
        jac = sp.expand(A[h, ell] * _close_on_A(act, dlog))
        leftover = {x.base for x in jac.atoms(sp.Indexed)} - {A}
        if leftover or jac.has(_Z):
            raise AssertionError(f"{name}: the Jacobian does not close on A ({jac})")
        out.append(jac)
    return out[0], out[1]


def jacobian_fn(name: str):
    """`(J(h', ℓ', k, p), J_b(h', ℓ', k))`: the derived Jacobians with their free indices
    renamed (the form the chain rule needs)."""
    jc, jb = derive_jacobians(name)

    def jchi(hh, ll, kk, pp):
        return rename(jc, {h: hh, ell: ll, k: kk, p: pp})

    def jbias(hh, ll, kk):
        return rename(jb, {h: hh, ell: ll, k: kk})

    return jchi, jbias


