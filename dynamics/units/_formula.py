"""A function of several fields written as a formula, `"he1(nu1) + he1(nu1)*he1(nu2)"`: the
teacher of a multi-index model, given in a config.

The formula is parsed with Python's `ast` and only these are accepted: numbers; the fields
`nu1` … `nuM`; `+`, `−`, `*`, `/`, `**` with a number exponent; and calls of a registered unit
by its name (`he1` … `he4`, `erf`, `relu`, `tanh`, `abs`, `sign`, `square`, `linear`) on one
argument. Nothing is evaluated as Python, so a formula can do nothing else.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from typing import cast

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Scalar

from .._errors import ConfigError
from ._base import get_unit, unit_names
from ._expansion import POINTS, normal_rule
from ._polynomial import PolynomialUnit

_FIELD = re.compile(r"^nu([1-9][0-9]*)$")
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
        ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b}


class Formula(eqx.Module):
    """A scalar function of the fields `ν (M,)` written as a formula (the module docstring);
    `n_fields` is the largest `k` of the fields `nuk` it names."""

    text: str = eqx.field(static=True)
    n_fields: int = eqx.field(static=True)

    @staticmethod
    def parse(text: str, where: str = "model.teacher") -> Formula:
        """The formula `text`, checked; a one-line [`ConfigError`][] naming `where`
        otherwise."""
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as err:
            raise ConfigError(f"{where} = {text!r}: not a formula ({err.msg})") from None
        called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
        fields = [_check(node, text, where, called) for node in ast.walk(tree)]
        used = [k for k in fields if k]
        if not used:
            raise ConfigError(f"{where} = {text!r}: the formula names no field (nu1, nu2, …)")
        return Formula(text=text.strip(), n_fields=max(used))

    def __call__(self, nu: Float[Array, " M"]) -> Scalar:
        return _evaluate(_tree(self.text).body, nu)

    def polynomial_degree(self) -> int | None:
        """The total degree when the formula is a polynomial in the fields (units that are
        polynomials, non-negative integer powers), else None."""
        return _degree(_tree(self.text).body)

    def information_exponents(self, order: int = 8) -> tuple[int | None, ...]:
        """Per field `ν_m`, the smallest `k ≥ 1` with `E[f(ν) He_k(ν_m)] ≠ 0` (the other fields
        integrated out, all independent standard normals): the information exponent of the
        target along that direction alone. None where every coefficient up to `order`
        vanishes: that direction is learnable only together with others (a staircase's later
        steps)."""
        M = self.n_fields
        points = POINTS if M == 1 else max(24, order + 8)
        x, w = normal_rule(points)
        grids = np.meshgrid(*([x] * M), indexing="ij")
        nodes = np.stack([g.ravel() for g in grids], axis=-1)               # (points^M, M)
        weights = functools.reduce(np.multiply.outer, [w] * M).ravel()
        f = np.asarray(_evaluate(_tree(self.text).body, jnp.asarray(nodes.T)), np.float64)
        f = np.broadcast_to(f, weights.shape)
        norm = math.sqrt(max(float(np.sum(weights * (f - np.sum(weights * f)) ** 2)), 0.0))
        scale = max(norm, abs(float(np.sum(weights * f))), np.finfo(np.float64).tiny)
        out: list[int | None] = []
        for m in range(M):
            he = np.polynomial.hermite_e.hermevander(nodes[:, m], order)
            found = None
            for k in range(1, order + 1):
                c = float(np.sum(weights * f * he[:, k])) / math.sqrt(math.factorial(k))
                if abs(c) > 1e-9 * scale:
                    found = k
                    break
            out.append(found)
        return tuple(out)


@functools.cache
def _tree(text: str) -> ast.Expression:
    return ast.parse(text, mode="eval")


def _check(node: ast.AST, text: str, where: str, called: set[int]) -> int:
    """0, or `k` for the field `nuk`; a [`ConfigError`][] for anything not allowed (`called`:
    the `id`s of the names being called, the only places a unit's name may stand)."""
    def bad(what: str) -> ConfigError:
        return ConfigError(f"{where} = {text!r}: {what} is not allowed; write numbers, the "
                           "fields nu1, nu2, …, + − * / ** and the units "
                           f"{', '.join(unit_names())}")

    if isinstance(node, ast.Name):
        m = _FIELD.match(node.id)
        if m is not None:
            return int(m.group(1))
        if node.id in unit_names() and id(node) in called:
            return 0
        if node.id in unit_names():
            raise bad(f"the unit {node.id!r} without its argument")
        raise bad(f"the name {node.id!r}")
    if isinstance(node, ast.Call):
        if (not isinstance(node.func, ast.Name) or node.func.id not in unit_names()
                or len(node.args) != 1 or node.keywords):
            raise bad("a call other than a unit of one argument")
        return 0
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Pow):
            if not (isinstance(node.right, ast.Constant) and _number(node.right.value)):
                raise bad("a power whose exponent is not a number")
        elif type(node.op) not in _OPS:
            raise bad(f"the operator {type(node.op).__name__}")
        return 0
    if isinstance(node, ast.Constant):
        if not _number(node.value):
            raise bad(f"the constant {node.value!r}")
        return 0
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.USub, ast.UAdd)):
            raise bad(f"the operator {type(node.op).__name__}")
        return 0
    if isinstance(node, (ast.Expression, ast.Load, ast.operator, ast.unaryop)):
        return 0
    raise bad(f"the syntax {type(node).__name__}")


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _evaluate(node: ast.AST, nu: Array) -> Array:
    if isinstance(node, ast.Constant):
        return jnp.asarray(float(cast(float, node.value)))
    if isinstance(node, ast.Name):
        return nu[int(node.id[2:]) - 1]
    if isinstance(node, ast.UnaryOp):
        v = _evaluate(node.operand, nu)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.Call):
        return get_unit(node.func.id)(_evaluate(node.args[0], nu))      # type: ignore[attr-defined]
    assert isinstance(node, ast.BinOp)
    a, b = _evaluate(node.left, nu), _evaluate(node.right, nu)
    if isinstance(node.op, ast.Pow):
        return a ** float(node.right.value)                              # type: ignore[attr-defined]
    return _OPS[type(node.op)](a, b)


def _degree(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant):
        return 0
    if isinstance(node, ast.Name):
        return 1
    if isinstance(node, ast.UnaryOp):
        return _degree(node.operand)
    if isinstance(node, ast.Call):
        unit, inner = get_unit(node.func.id), _degree(node.args[0])     # type: ignore[attr-defined]
        if not isinstance(unit, PolynomialUnit) or inner is None:
            return None
        return unit.degree * inner
    assert isinstance(node, ast.BinOp)
    a, b = _degree(node.left), _degree(node.right)
    if a is None or b is None:
        return None
    if isinstance(node.op, ast.Pow):
        p = node.right.value                                             # type: ignore[attr-defined]
        return a * int(p) if float(p).is_integer() and p >= 0 else None
    if isinstance(node.op, ast.Div):
        return a if b == 0 else None
    return a + b if isinstance(node.op, ast.Mult) else max(a, b)
