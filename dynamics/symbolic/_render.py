"""Rendering the derivation as Markdown with LaTeX (`docs/equations.md`).

[`render`][] is deterministic: the same sympy version and the same derivation give the same
text byte for byte, which is what `python -m headflow.dynamics.symbolic --check` and the test
compare.
"""

from __future__ import annotations

import functools
import re

import sympy as sp
from sympy.printing.latex import LatexPrinter
from sympy.printing.precedence import PRECEDENCE

from . import _algebra as al
from ._activations import symbolic_activation, symbolic_names
from ._closed import Raw, bayes_construction, gradient_flow, limits, paper_variables, risk
from ._codegen import generate
from ._derive import ERR, Equation, error_form, local_field_ode, manifold_ode
from ._readout import readout_section

_NAMES = {al.wd: r"\lambda", al.e2: "e^2", ERR: r"\hat y - y"}


class _Printer(LatexPrinter):
    """Compact index notation: `A_{h\\ell}`, `\\sum_{h'\\ell'}` (ranges implied by the kind of
    index), `\\delta_{\\ell 1}`, primes on indices."""

    def __init__(self):
        super().__init__({"symbol_names": {}})

    def _print_Symbol(self, expr, style="plain"):
        if isinstance(expr, Raw):
            return expr.name
        if expr in _NAMES:
            return _NAMES[expr]
        name = expr.name
        primes = len(name) - len(name.rstrip("'"))
        base = name.rstrip("'")
        out = super()._print_Symbol(sp.Symbol(base)) if base else ""
        return out + "'" * primes

    def _print_Indexed(self, expr):
        base = self._print(expr.base.label)
        idx = [self._print(i) for i in expr.indices]
        simple = all(isinstance(i, sp.Symbol) for i in expr.indices)
        if simple:
            return self._with_base(base) + "_{" + _join(idx) + "}"
        sep = ","
        return self._with_base(base) + "_{" + sep.join(idx) + "}"

    @staticmethod
    def _with_base(base: str) -> str:
        if "^" in base or "_" in base or " " in base or "/" in base:
            return "{" + base + "}"
        return base

    def _print_IndexedBase(self, expr):
        return self._print(expr.label)

    def _print_Sum(self, expr):
        idx = _join([self._print(lm[0]) for lm in expr.limits])
        body = expr.function
        inner = self._print(body)
        if isinstance(body, sp.Add):
            inner = r"\left(" + inner + r"\right)"
        return r"\sum_{" + idx + "} " + inner

    def _print_KroneckerDelta(self, expr, exp=None):
        i, j = (self._print(a) for a in expr.args)
        return r"\delta_{" + i + " " + j + "}"

    def _print_Derivative(self, expr):
        (var, cnt), = expr.variable_count
        return r"\frac{d " + self._print(expr.expr) + "}{d " + self._print(var) + "}"

    def _print_Function(self, expr, exp=None):
        if expr.func.__name__ == "pi":
            return r"\pi(" + ", ".join(self._print(a) for a in expr.args) + ")"
        return super()._print_Function(expr, exp)

    def parenthesize_sum(self, e):
        return self.parenthesize(e, PRECEDENCE["Mul"])


def _join(tokens: list[str]) -> str:
    """Concatenate index names, with a space after a LaTeX command (`\\ell k`, not `\\ellk`)."""
    out = ""
    for t in tokens:
        if out and re.search(r"\\[a-zA-Z]+$", out) and t[:1].isalpha():
            out += " "
        out += t
    return out


_P = _Printer()


def latex(e) -> str:
    """LaTeX of a sympy expression in the notation of `docs/equations.md`."""
    return _P.doprint(e)


def _eq(lhs, rhs, label: str | None = None) -> str:
    rhs_list = rhs if isinstance(rhs, (list, tuple)) else [rhs]
    body = latex(lhs) + " = " + " = ".join(latex(r) for r in rhs_list)
    out = "$$\n" + body + "\n$$\n\n"
    return (f"*{label}:*\n\n" if label else "") + out


def _equation(e: Equation, label: bool = False) -> str:
    return _eq(e.lhs, e.rhs, e.label if label else None)


def jacobian_section(name: str) -> str:
    """Markdown of one activation's definition and its derived Jacobians."""
    act = symbolic_activation(name)
    M = manifold_ode(name)
    return "".join([f"### `{name}`\n\n", _eq(al.A[al.h, al.ell], act.definition(al.h, al.ell)),
                    _eq(Raw(r"\partial A_{h\ell}/\partial \chi_{kp}"), M.jacobian),
                    _eq(Raw(r"\partial A_{h\ell}/\partial b_{k}"), M.jacobian_b)])


def integrand_section(name: str) -> str:
    """Markdown of one activation's per-node quantities of the reduced ODE."""
    M = manifold_ode(name)
    gbh = M.stages["gbh"]
    return "".join([
        f"### `{name}`\n\n",
        _eq(M.stages["Ghat"][0], [M.stages["Ghat"][1], al.tidy(M.expanded["Ghat"], pretty=True)]),
        _eq(gbh[0], [gbh[1], al.tidy(M.expanded["gbh"], pretty=True)] if gbh[1] != 0 else gbh[1]),
        _eq(M.stages["Gamma"][0], al.tidy(M.stages["Gamma"][1], pretty=True)),
        "Identities verified during the derivation: " + "; ".join(M.checks) + ".\n\n"])


def render_activation(name: str) -> str:
    """The equations of one activation (definition, Jacobians, per-node quantities of the
    reduced ODE) as Markdown with LaTeX: what `docs/equations.md` shows for each activation."""
    return jacobian_section(name) + integrand_section(name)


@functools.cache
def render() -> str:
    """The whole of `docs/equations.md` (cached: the derivation is deterministic)."""
    out = [_HEADER]
    gen = local_field_ode()
    out.append("## 1. From the SGD step to the generic local-field ODE\n\n"
               "(The derivation in words: [ode.md](ode.md#derivation-of-the-odes).) "
               "One step on a batch of B fresh samples (the gradient by the chain rule through "
               r"$\lambda_{i\beta\ell} = w_i\cdot x_{\beta\ell}/\sqrt D$, "
               r"$G_{i\beta\ell} = \partial\ell_\beta/\partial\lambda_{i\beta\ell}$; teacher "
               "vectors fixed):\n\n")
    out.append(_equation(gen["step"]))
    out.append("The overlap increment, from bilinearity and the Gram rules "
               r"$w_i\cdot w_j = D\Omega_{ij}$, $w_i\cdot x_{\beta\ell} = \sqrt D\,"
               r"\lambda_{i\beta\ell}$, $x_{\beta\ell}\cdot x_{\beta'\ell'} = D(\delta_{\beta"
               r"\beta'}\delta_{\ell\ell'} + \zeta_{\beta\ell\beta'\ell'}/\sqrt D)$ "
               "(independent tokens in high dimension):\n\n")
    out.append(_equation(gen["increment"]))
    out.append("In time $t = \\text{steps}/D$, $d\\Omega/dt = \\lim_{D\\to\\infty} "
               "D\\,\\mathbb{E}[\\Delta\\Omega]$ (the $\\zeta$ and $1/D$ terms vanish; the B "
               "i.i.d. samples give $B\\,\\mathbb{E}$ per sum over the batch):\n\n")
    for key in ("ss", "st", "bias"):
        e = gen[key]
        out.append(_eq(e.lhs, al.tidy(e.rhs, pretty=True), e.label))

    out.append("## 2. Activations and their Jacobians (derived from the definitions)\n\n"
               "Each Jacobian is `sympy.diff` of $\\log A_{h\\ell}$ with the Kronecker sums "
               "contracted and the definition substituted back, so it closes on $A$ "
               "(`dynamics/symbolic/_activations.py`).\n\n")
    for name in symbolic_names():
        out.append(jacobian_section(name))

    M0 = manifold_ode("softmax")
    out.append("## 3. The value fields integrated out (invariant manifold)\n\n"
               "([model.md](model.md#the-invariant-manifold), "
               "[the risk](model.md#population-risk).) "
               "Given the key fields, the value fields are centred Gaussians, independent "
               "across tokens, with "
               r"$\mathrm{Cov}(z_{h\ell}, z_{kp}) = s_{hk}\delta_{\ell p}$, "
               r"$\mathrm{Cov}(z_{h\ell}, y^*_p) = n_h\delta_{\ell p}$, "
               r"$\mathrm{Var}\,y^*_\ell = \rho^*$, $\mathrm{Var}\,\xi = 1$. "
               "The error is the linear form\n\n")
    out.append(_eq(ERR, error_form().as_expr()))
    out.append("and the key and bias gradients are "
               r"$G^\chi_{h\ell} = (\hat y - y)\,Y_{h\ell}$, $G^b_h = (\hat y - y)\,Y^b_h$ "
               r"with $Y_{h\ell} = \partial(\hat y - y)/\partial\chi_{h\ell} = "
               r"\sum_{h'\ell'} z_{h'\ell'}\,\partial A_{h'\ell'}/\partial\chi_{h\ell}$; "
               r"the value gradient is $G^z_{h\ell} = (\hat y - y) A_{h\ell}$. "
               "Conditional moments (Isserlis' theorem for products of these Gaussian linear "
               "forms):\n\n")
    st = M0.stages
    out.append(_eq(st["e2"][0], st["e2"][1], r"$e^2 = \mathbb{E}[(\hat y - y)^2 \mid "
                   r"\text{keys}]$ (the risk integrand)"))
    out.append(_eq(st["u"][0], st["u"][1], r"$u = \partial(\tfrac12 e^2)/\partial A = "
                   r"\mathrm{Cov}(\hat y - y, z \mid \text{keys})$"))
    out.append(_eq(al.Ghat[al.h, al.ell],
                   [Raw(r"\mathrm{Cov}(\hat y - y, Y_{h\ell})"),
                    Raw(r"\partial(\tfrac12 e^2)/\partial\chi_{h\ell}"),
                    Raw(r"\sum_{h'\ell'} u_{h'\ell'}\,\partial A_{h'\ell'}/"
                        r"\partial\chi_{h\ell}")],
                   r"the conditional key gradient (verified: the two sides agree as index "
                   r"expressions, for every activation)"))
    out.append(_eq(Raw(r"\hat g^b_h"),
                   [Raw(r"\mathrm{Cov}(\hat y - y, Y^b_h)"),
                    Raw(r"\partial(\tfrac12 e^2)/\partial b_h")]))
    out.append(_eq(Raw(r"\Gamma_{hk\ell}"), sp.Symbol(
        r"\mathrm{Cov}(Y_{h\ell}, Y_{k\ell}) = \sum_{h'k'p} \frac{\partial A_{h'p}}"
        r"{\partial\chi_{h\ell}}\, s_{h'k'}\, \frac{\partial A_{k'p}}{\partial\chi_{k\ell}}")))
    out.append("Isserlis: $\\mathbb{E}[(\\hat y - y)^2 Y_{h\\ell} Y_{k\\ell}\\mid\\text{keys}] = "
               "e^2\\,\\Gamma_{hk\\ell} + 2\\hat G_{h\\ell}\\hat G_{k\\ell}$, and every drift "
               "or noise term of the cross overlaps $K V^\\top$, $K v^*$, $V K^{*\\top}$ is "
               "an odd moment, hence zero: the manifold is invariant.\n\n")

    out.append("## 4. The reduced ODE in $(m, q, n, s, b)$\n\n"
               "Inserting §3 into §1 block by block (keys, values, teacher keys, teacher "
               "value) and collecting the expectations over the key fields (θ and the "
               "Gaussian key fields, the signal at $\\ell = 1$) into named quantities:\n\n")
    for lhs, integrand in M0.integrands.values():
        out.append(_eq(lhs, al.Expect(al.tidy(integrand, pretty=True))))
    out.append("The system (the same for every activation; the activation enters only "
               "through the integrands):\n\n")
    for name in ("m", "q", "n", "s", "b", "kv", "kvs", "vks"):
        lhs, e = M0.rhs[name]
        out.append(_eq(lhs, al.tidy(e, pretty=True) if e != 0 else e))
    out.append("The per-node quantities of each activation (compact chain-rule form, then "
               "written out in $A$, $s$, $n$):\n\n")
    for name in symbolic_names():
        out.append(integrand_section(name))

    pv = paper_variables()
    out.append("## 5. The paper's variables $(m_{hf}, r, b, v)$\n\n"
               "With $r = q - m m^\\top$ (the key overlaps orthogonal to the signal) the key "
               "fields are $\\chi_{h\\ell} = \\sum_f m_{hf}\\chi^*_{f\\ell} + \\sum_k "
               "r^{1/2}_{hk} g^\\perp_{k\\ell}$, and the value overlaps $v = (n, s)$ keep the "
               "equations of §4. Then\n\n")
    out.append(_eq(pv["Tperp"].lhs, pv["Tperp"].rhs))
    out.append(_eq(pv["Tq"].lhs, pv["Tq"].rhs))
    out.append(_eq(pv["dr"].lhs, pv["dr"].rhs))
    out.append("($dr/dt = dq/dt - (dm/dt) m^\\top - m (dm/dt)^\\top$, checked with explicit "
               "symbolic matrices; the signal direction drops out of the drift of $r$.)\n\n")

    gf = gradient_flow()
    out.append("## 6. The key drift as gradient flow: derivatives of $a$ and $C$\n\n"
               "The η¹ part of the key and bias equations is population gradient flow of "
               "$R/2$ in weight space, pushed to the overlaps with the same bilinear algebra "
               "as §1. It equals the $T^m$, $g^b$ terms of §4 sample by sample (moving $k_h$ "
               "along $k^*_f$, or $b_h$, leaves $r$ unchanged, so the pathwise derivative of "
               "$e^2$ is $2\\sum_\\ell \\hat G_{h\\ell}\\chi^*_{f\\ell}$), and the $T^q$ "
               "terms in expectation (Gaussian integration by parts); the tests check both, "
               "the latter within Monte Carlo error bars:\n\n")
    for key in ("m", "q", "b", "dR/dm", "dR/dq", "dR/db"):
        out.append(_eq(gf[key].lhs, gf[key].rhs))
    out.append("where $\\partial a_k/\\partial m_{hf}$, $\\partial C_{kk'}/\\partial q_{hh'}$, "
               "... are the derivatives of the Gaussian expectations $a$, $C$ with respect to "
               "the overlaps (through the field law $\\chi = m\\chi^* + r^{1/2}g^\\perp$).\n\n")

    out.append("## 7. Closed forms\n\n")
    out.append(_equation(risk(), label=True))
    for e in limits().values():
        out.append(_equation(e, label=True))
    bc = bayes_construction()
    out.append("**Bayes-softmax construction** ([model.md](model.md#bayes-optimal-risk-and-the-"
               "bayes-softmax-construction); one head per support point $h$ with "
               "weight $p^\\theta_h$: $m = \\Theta$, $q = \\Theta\\Theta^\\top$, "
               "$b_h = \\log p^\\theta_h - |\\theta_h|^2/2$, $n = \\rho^* 1$, "
               "$s = \\rho^* 11^\\top$):\n\n")
    for e in bc["equations"]:
        out.append(_equation(e, label=True))
    sizes = ", ".join(f"(S, L, F) = {x}" for x in bc["verified"])
    out.append(f"Verified symbolically at {sizes}. Since $p_\\ell$ is the posterior of the "
               "location, $\\mathbb{E}[p_1] = \\mathbb{E}[\\sum_\\ell p_\\ell^2]$ (the true "
               "location is a draw from the posterior), so the construction's risk is "
               "$\\Delta^2 + \\rho^*(1 - \\mathbb{E}\\sum_\\ell p_\\ell^2) = R_{Bayes}$.\n\n")

    g = generate("bayes_softmax", 2, 3, 1, True)
    out.append("## 8. Generated code\n\n"
               "`headflow.dynamics.symbolic.generate(activation, H, L, F)` prints each index "
               "expression of §3–4 as JAX array code (one `einsum` per term) and "
               "`SymbolicField` (`[ode] rhs = \"symbolic\"`) runs it at the same Gaussian "
               "nodes as the autodiff field. For `bayes_softmax`, H = 2, L = 3, F = 1:\n\n"
               "```python\n" + g.integrands_source + "\n" + g.rhs_source + "```\n\n")
    out.append(readout_section())
    return "".join(out)


_HEADER = """# The order-parameter ODEs, derived symbolically

<!-- Generated by `python -m headflow.dynamics.symbolic` from `dynamics/symbolic/`; do not edit by
hand.
     `python -m headflow.dynamics.symbolic --check` (and tests/test_symbolic.py) fail when it is
     stale. -->

Everything below is computed by sympy (`dynamics/symbolic/`), not typed: the SGD step is pushed
through a bilinear vector algebra, the activation Jacobians are differentiated from the
definitions, the value fields are integrated out with Isserlis' theorem, and the expectations are
collected into named quantities. Design notes: [symbolic.md](symbolic.md). Model and
conventions: [model.md](model.md).

**Notation.** Heads $h, k$ ($1..H$), latent directions $f, g$ ($1..F$), tokens $\\ell, p$
($1..L$, the signal at $\\ell = 1$); primed indices are summed. Sums run over the full range of
their index. $\\chi_{h\\ell}$, $z_{h\\ell}$: student key and value fields; $\\chi^*_{f\\ell}$,
$y^*_\\ell$: teacher fields; $A = \\sigma(\\chi + b)$; $\\eta$, $\\eta_b$, $\\lambda$, $B$: step
sizes, weight decay, batch; $\\Delta$ label noise, $\\rho^* = |v^*|^2/D$.
$\\mathbb{E}$ is over one sample.

"""
