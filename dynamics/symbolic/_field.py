"""The generated right-hand side as a diffrax vector field (`[ode] rhs = "symbolic"`)."""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._model import AttentionBase
from .._overlaps import FieldLaw, Overlaps
from .._risk import over_theta, split_key_normals
from .._steps import StepSizes
from ..expectations import AbstractExpectation, AbstractNodes
from ..fields import MAX_GROUP, AbstractField
from ..models.attention._nodes import key_nodes
from ._activations import symbolic_activation
from ._codegen import INTEGRANDS, Generated, generate


class SymbolicField(AbstractField):
    """The reduced ODE on the invariant manifold with the right-hand side *generated* from the
    symbolic derivation ([`headflow.dynamics.symbolic.manifold_ode`][], rendered in
    `docs/equations.md`) instead of autodiff.

    Same Gaussian nodes, same field law and the same θ-average as
    [`headflow.dynamics.models.attention.ManifoldField`][], so the two agree to round-off; only the
    per-node integrands (the activation, `e²`, `Ĝ`, `ĝ^b`, `Γ`, ...) and the assembly of the ODE
    are the generated code.

    `style` selects the code generator: `"einsum"` (vectorized array code, the default) or
    `"scalar"` (every entry unrolled through `sympy.lambdify`; small cases only).
    """

    model: AttentionBase
    steps: StepSizes
    nodes: AbstractNodes
    sgd_noise: bool = eqx.field(static=True, default=True)
    style: str = eqx.field(static=True, default="einsum")
    batch: int = eqx.field(static=True, default=1)
    chunk: ClassVar[int] = 2048
    manifold_form: ClassVar[bool] = True

    @classmethod
    def build(cls, model: AttentionBase, steps: StepSizes, backend: AbstractExpectation, *,
              sgd_noise: bool = True, max_group: int = MAX_GROUP,
              style: str = "einsum") -> SymbolicField:
        """**Arguments:** as for `ManifoldField.build` (the same nodes). **Returns:** the field
        (the code is generated here, once per process and case)."""
        symbolic_activation(model.activation.name)  # a one-line error if there is none
        field = cls(model=model, steps=steps, nodes=key_nodes(model, backend,
                                                              max_group=max_group),
                    sgd_noise=sgd_noise, style=style)
        field.generated()
        return field

    def generated(self) -> Generated:
        model = self.model
        return generate(model.activation.name, model.H, model.L, model.F, self.sgd_noise,
                        self.style)

    def node_derivative(self, ov: Overlaps, x: Float[Array, " d"]) -> Overlaps:
        model, hp = self.model, self.steps
        gen = self.generated()
        law = FieldLaw.from_overlaps(ov, model.rho, manifold=True)
        tn, g_star, g_perp = split_key_normals(model, x)
        rho = jnp.asarray(model.rho, ov.s.dtype)
        noise = jnp.asarray(model.noise, ov.s.dtype)

        def at(theta):
            chi_star, chi = law.key_fields(theta, g_star, g_perp)
            return gen.integrands(chi, chi_star, ov.b, ov.n, ov.s, rho, noise)

        E = over_theta(model, tn, g_star, at)
        ex = [E[c] for c in INTEGRANDS if c in E]
        d = gen.rhs(*ex, ov.m, ov.q, ov.n, ov.s, ov.b, hp.lr, hp.lr_bias, hp.weight_decay,
                    hp.batch, rho)
        dn, ds = d["n"], d["s"]
        if not model.train_values:   # frozen values: v_h = v* is not updated
            dn, ds = jnp.zeros_like(dn), jnp.zeros_like(ds)
        zero = Overlaps.manifold(jnp.zeros_like(ov.m), jnp.zeros_like(ov.q),
                                 jnp.zeros_like(ov.n), jnp.zeros_like(ov.s),
                                 jnp.zeros_like(ov.b))
        return eqx.tree_at(lambda o: (o.m, o.q, o.n, o.s, o.b, o.kv, o.kvs, o.vks), zero,
                           (d["m"], d["q"], dn, ds, d["b"], d["kv"], d["kvs"], d["vks"]))
