"""Unit-difference perturbations of the order parameters of a model of the family
(`GramState`: the Gram matrix of student and teacher rows and the scalar parameters), the
counterpart of [`HeadModes`][] for models whose interchangeable units are student rows of the
Gram matrix (the committee machine's hidden units, `docs/committee.md`).

The symmetric subspace (every student alike) is the image of [`unit_average`][]: the student
block of the Gram matrix replaced by its mean diagonal and mean off-diagonal entry, the
student–teacher block by its student mean (column means), the teacher block kept, and every
trained per-unit parameter by its mean. The perturbations where the units differ are the
complement of that subspace among the moving coordinates (symmetric student and student–teacher
blocks, trained parameters); [`UnitModes`][] holds an orthonormal basis of them. Unlike the
attention heads' modes they are not reduced further by Schur's lemma: the tangent-linear
equation runs on all of them (a few dozen coordinates for the committees one studies).
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._errors import HeadflowError
from ..measures import alignment
from ..models._base import GramState, ModelBase
from ._symmetric import sym_matrix


def unit_average(model: ModelBase, state: GramState) -> GramState:
    """The orthogonal projection of `state` onto the symmetric subspace (every student alike);
    the teacher block and the untrained parameters are kept."""
    K = model.n_students
    g = state.gram
    ss = sym_matrix(g[:K, :K])
    st = jnp.broadcast_to(jnp.mean(g[:K, K:], axis=0), g[:K, K:].shape)
    top = jnp.concatenate([ss, st], axis=1)
    bottom = jnp.concatenate([st.T, g[K:, K:]], axis=1)
    params = {k: (jnp.full_like(v, jnp.mean(v)) if k in _unit_params(model) else v)
              for k, v in state.params.items()}
    return GramState(gram=jnp.concatenate([top, bottom], axis=0), params=params)


def _unit_params(model: ModelBase) -> tuple[str, ...]:
    """The trained parameters with one entry per student unit."""
    return tuple(k for k in model.trained if k in model.layout.per_unit)


class UnitModes(eqx.Module):
    """Bases of the unit-difference perturbations of a [`GramState`][] model, with the same
    interface as [`HeadModes`][] (`standard (1, N, μ)`: one block holding every difference
    mode; `differences (N, μ)`; `labels`), and the state's flattening, symmetric projection and
    unit alignment used by the tangent-linear analysis ([`linear_stability`][],
    [`linear_spread`][]).

    Coordinates ([`flatten`][UnitModes.flatten]): the Gram matrix (all `P²` entries), then the
    parameters in sorted name order."""

    standard: Float[Array, "1 N mu"]
    differences: Float[Array, "N mu"]
    labels: tuple[str, ...] = eqx.field(static=True)
    model: ModelBase
    param_sizes: tuple[tuple[str, int], ...] = eqx.field(static=True)

    @classmethod
    def build(cls, model: ModelBase) -> UnitModes:
        K, P = model.n_students, model.n_rows
        if K < 2:
            raise HeadflowError(f"unit-difference perturbations need at least 2 student units "
                                f"(model.K = {K})")
        state = model.limit_state()
        sizes = tuple((k, int(np.size(state.params[k]))) for k in sorted(state.params))
        N = P * P + sum(n for _, n in sizes)
        trained = _unit_params(model)
        # the moving coordinates: symmetric student and student–teacher blocks, trained params
        cols, names = [], []
        for i in range(K):
            for j in range(i, P):
                e = np.zeros((P, P))
                e[i, j] = e[j, i] = 1.0
                cols.append(np.concatenate([e.ravel(), np.zeros(N - P * P)]))
                names.append(f"g_{i}{j}")
        off = P * P
        for k, n in sizes:
            for i in range(n):
                if k in trained:
                    v = np.zeros(N)
                    v[off + i] = 1.0
                    cols.append(v)
                    names.append(f"{k}_{i}")
            off += n
        moving = np.stack(cols, axis=1)
        moving /= np.linalg.norm(moving, axis=0)
        probe = cls(standard=jnp.zeros((1, N, 1)), differences=jnp.zeros((N, 1)), labels=(),
                    model=model, param_sizes=sizes)
        avg = np.stack([np.asarray(probe.flatten(probe.average(probe.unflatten(
            jnp.asarray(c))))) for c in moving.T], axis=1)                 # (N, m)
        rest = moving - avg                                                 # unit differences
        u, sv, _ = np.linalg.svd(rest, full_matrices=False)
        U = u[:, sv > 1e-8]
        labels = tuple(f"mode_{j}" for j in range(U.shape[1]))
        return cls(standard=jnp.asarray(U[None]), differences=jnp.asarray(U), labels=labels,
                   model=model, param_sizes=sizes)

    @property
    def mu(self) -> int:
        return self.standard.shape[-1]

    def flatten(self, state: GramState) -> Float[Array, " N"]:
        return jnp.concatenate([state.gram.ravel()]
                               + [jnp.ravel(state.params[k]) for k, _ in self.param_sizes])

    def unflatten(self, vec: Float[Array, " N"]) -> GramState:
        P = self.model.n_rows
        gram = vec[:P * P].reshape(P, P)
        params, i = {}, P * P
        for k, n in self.param_sizes:
            params[k] = vec[i:i + n]
            i += n
        return GramState(gram=gram, params=params)

    def average(self, state: GramState) -> GramState:
        return unit_average(self.model, state)

    def alignment(self, state: GramState) -> Float[Array, "K M"]:
        """The alignment `α_in` of the model's layout (`R_in/√Q_ii` for the committee), whose
        spread over the units defines the escape."""
        a, g = self.model.layout.alignment
        named = self.model.named(state)
        return alignment(named[a], named[g])
