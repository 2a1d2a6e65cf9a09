"""The vector fields of the model family (`docs/models.md#the-engine`): the mean of the
per-sample increment ([`headflow.dynamics.models.sample_increment`][], autodiff of the model's own
loss) over Gaussian nodes of all fields, or its closed form where the model's unit gives one."""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree

from .._linalg import psd_sqrt
from .._steps import StepSizes
from ..expectations import AbstractExpectation, AbstractNodes, Quadrature, exact_rule
from ..models._base import GramState, ModelBase, by_value
from ..models._increment import assemble, exact_moments, sample_increment
from ._base import AbstractField
from ._nodes import MAX_GROUP, Group, product_group, row_group, unit_permutations


def model_dims(model: ModelBase) -> int:
    """Gaussian dimensions of one sample: the `P` fields and the label noise."""
    return model.n_rows + 1


def student_permutations(model: ModelBase, max_group: int = MAX_GROUP) -> np.ndarray:
    """The permutations of the student rows the nodes are closed under
    ([`unit_permutations`][] of the `S` students)."""
    return unit_permutations(model.n_students, max_group)


def model_group(model: ModelBase, max_group: int = MAX_GROUP) -> Group:
    """The group of signed permutations of the node coordinates that the nodes are closed
    under: the permutations of the student rows (`student_permutations`) times the group
    of the sign flips the model declares (`AbstractModel.symmetries`; all their products, the
    identity first)."""
    dim = model_dims(model)
    group = row_group(dim, 0, 1, student_permutations(model, max_group))
    flips = [np.concatenate([s.row_signs(model.n_students, model.n_teachers), [1.0]])
             for s in model.symmetries()]
    if flips:
        signs = [np.ones(dim)]
        for f in flips:
            signs += [s * f for s in signs]
        unique = np.unique(np.stack(signs), axis=0)
        order = np.argsort(-np.sum(unique, axis=1), kind="stable")   # the identity first
        S = unique[order]
        group = product_group(group, (np.tile(np.arange(dim), (len(S), 1)), S))
    return group


def model_nodes(model: ModelBase, backend: AbstractExpectation, *,
                max_group: int = MAX_GROUP) -> AbstractNodes:
    """Nodes over all fields and the label noise, closed under [`model_group`][]: the exact
    field is equivariant under it (a permutation of the students and of their parameters, a
    declared sign flip), and so is the estimate on closed nodes, whatever their number; the
    states the group fixes stay fixed to round-off."""
    return backend.closed_nodes(model_dims(model), *model_group(model, max_group))


def sample_fields(state: GramState, x: Float[Array, " d"]) -> Float[Array, " P"]:
    """The fields `λ = Ω^{1/2} x[:P]` of all rows from standard normals (the symmetric root,
    so that permuting the nodes permutes the fields)."""
    P = state.gram.shape[-1]
    return psd_sqrt(state.gram) @ x[:P]


class ModelField(AbstractField):
    """The drift of a model's order parameters, `E[U]` over nodes of all fields (the generic
    autodiff path: it runs any model, and checks the exact backend where there is one)."""

    model: ModelBase
    steps: StepSizes
    nodes: AbstractNodes
    sgd_noise: bool = eqx.field(static=True, default=True)
    batch: int = eqx.field(static=True, default=1)
    chunk: ClassVar[int] = 2048
    manifold_form: ClassVar[bool] = False

    @classmethod
    def build(cls, model: ModelBase, steps: StepSizes, backend: AbstractExpectation, *,
              sgd_noise: bool = True, max_group: int = MAX_GROUP) -> ModelField:
        return cls(model=model, steps=steps, nodes=model_nodes(model, backend,
                                                               max_group=max_group),
                   sgd_noise=sgd_noise)

    def node_derivative(self, ov: PyTree, x: Float[Array, " d"]) -> PyTree:
        P = self.model.n_rows
        return sample_increment(self.model, self.steps, ov, sample_fields(ov, x), x[P],
                                sgd_noise=self.sgd_noise)


class ExactField(AbstractField):
    """The drift in closed form ([`headflow.dynamics.models.exact_moments`][]): for a readout model
    whose unit gives the Gaussian integrals (erf, linear). Its error estimate is zero."""

    model: ModelBase
    steps: StepSizes
    # no nodes: the closed forms replace them
    nodes: AbstractNodes | None = None  # type: ignore[assignment]
    sgd_noise: bool = eqx.field(static=True, default=True)
    batch: int = eqx.field(static=True, default=1)
    chunk: ClassVar[int] = 1
    manifold_form: ClassVar[bool] = False

    @classmethod
    def build(cls, model: ModelBase, steps: StepSizes,
              backend: AbstractExpectation | None = None, *, sgd_noise: bool = True,
              max_group: int = MAX_GROUP) -> ExactField:
        del backend, max_group
        return cls(model=model, steps=steps, sgd_noise=sgd_noise)

    def node_derivative(self, ov: PyTree, x: Float[Array, " d"]) -> PyTree:
        del x
        return self(0.0, ov)

    def __call__(self, t, ov: PyTree, args=None) -> PyTree:
        del args
        field = self.at(t)
        GL, GG, gp = exact_moments(self.model, ov, sgd_noise=self.sgd_noise)
        return assemble(self.model, field.steps, ov, GL, GG, gp, sgd_noise=self.sgd_noise)

    def per_node(self, ov: PyTree, t=0.0) -> PyTree:
        return jax.tree.map(lambda v: v[None], self(t, ov))

    def with_error(self, ov: PyTree, t=0.0) -> tuple[PyTree, PyTree]:
        rhs = self(t, ov)
        return rhs, jax.tree.map(jnp.zeros_like, rhs)


@by_value
def has_closed_field(model: ModelBase) -> bool:
    """Whether [`ExactField`][] (closed-form integrals of a readout's unit) applies to
    `model`."""
    ro = model.readout(model.limit_state().params)
    return ro is not None and bool(ro.unit.exact)


def exact_backend(model: ModelBase, what: str = "drift") -> Quadrature | None:
    """For a polynomial model (`AbstractModel.loss_degree`), the Gauss–Hermite rule over all
    fields and the label noise that integrates its `what` exactly: the `"drift"` (the mean
    increment: degree `max(L, 2L − 2)` for a loss of degree L, the `η²` terms included) or
    the `"diffusion"` (the increments' covariance: twice that). None otherwise, or when the
    rule would be too large."""
    L = model.loss_degree()
    if L is None:
        return None
    degree = max(L, 2 * L - 2) * (2 if what == "diffusion" else 1)
    return exact_rule(model_dims(model), degree)


@by_value
def has_exact_field(model: ModelBase) -> bool:
    """Whether `[ode] expectation = "exact"` applies to `model`: closed forms
    ([`has_closed_field`][]) or an exact Gauss–Hermite rule ([`exact_backend`][])."""
    return has_closed_field(model) or exact_backend(model) is not None


def exact_field(model: ModelBase, steps: StepSizes, *, sgd_noise: bool = True
                ) -> AbstractField:
    """The exact drift of `model`: [`ExactField`][] where its unit has closed forms, else
    [`ModelField`][] on the nodes of [`exact_backend`][]."""
    if has_closed_field(model):
        return ExactField.build(model, steps, sgd_noise=sgd_noise)
    backend = exact_backend(model)
    if backend is None:
        raise ValueError(f"{type(model).__name__} has no exact drift")
    return ModelField.build(model, steps, backend, sgd_noise=sgd_noise)

