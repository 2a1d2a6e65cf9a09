"""Exact symmetries a model declares (`docs/models.md#symmetries`): transformations of the rows
of the Gram matrix (and of the scalar parameters) under which the law of the per-sample
increment is invariant, so that the exact ODE and SDE are equivariant under them and the states
they fix form invariant subspaces. The engine closes every node set under the declared group
(and the permutations of the students), so that these subspaces stay invariant to round-off at
any node count."""

from __future__ import annotations

import abc

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .._errors import HeadflowError


class AbstractSymmetry(eqx.Module):
    """One exact symmetry of a model: a sign flip of some rows of the Gram matrix, with the
    matching change of the scalar parameters. Its action on the fields is `λ → s·λ`; on the
    state `Ω → S Ω S`, `S = diag(s)`."""

    @abc.abstractmethod
    def row_signs(self, n_students: int, n_teachers: int) -> np.ndarray:
        """`s (P,)`: the sign (±1) of each row of the Gram matrix (students first)."""

    def param_signs(self, params: dict) -> dict:
        """The sign (±1, leafwise arrays) the symmetry gives each scalar parameter (default:
        none changes)."""
        return {k: jnp.ones_like(v) for k, v in params.items()}

    def act(self, model, state):
        """The image of a [`GramState`][headflow.dynamics.models.GramState] under the
        symmetry."""
        s = jnp.asarray(self.row_signs(model.n_students, model.n_teachers), state.gram.dtype)
        signs = self.param_signs(state.params)
        return type(state)(gram=state.gram * s[:, None] * s[None, :],
                           params={k: v * signs[k] for k, v in state.params.items()})


class SignFlip(AbstractSymmetry):
    """The sign flip of one student row (`student=i`) or one teacher row (`teacher=n`), and of
    the scalar parameters `params` (their entry `i`, or all of a parameter when `entry` is
    None):

    - `SignFlip(teacher=0)`: a target even in its field (`y = ν²`), so `R → −R`;
    - `SignFlip(student=i, params=("v",))`: an odd unit with its readout weight,
      `(w_i, v_i) → (−w_i, −v_i)`.
    """

    student: int | None = eqx.field(static=True, default=None)
    teacher: int | None = eqx.field(static=True, default=None)
    params: tuple[str, ...] = eqx.field(static=True, default=())

    def __check_init__(self):
        if (self.student is None) == (self.teacher is None):
            raise HeadflowError("SignFlip: give exactly one of student=i or teacher=n")

    def row(self, n_students: int, n_teachers: int) -> int:
        """The row of the Gram matrix that flips."""
        if self.student is not None:
            if not 0 <= self.student < n_students:
                raise HeadflowError(f"SignFlip(student={self.student}): the model has "
                                    f"{n_students} student rows")
            return self.student
        assert self.teacher is not None
        if not 0 <= self.teacher < n_teachers:
            raise HeadflowError(f"SignFlip(teacher={self.teacher}): the model has "
                                f"{n_teachers} teacher rows")
        return n_students + self.teacher

    def row_signs(self, n_students: int, n_teachers: int) -> np.ndarray:
        s = np.ones(n_students + n_teachers)
        s[self.row(n_students, n_teachers)] = -1.0
        return s

    def param_signs(self, params: dict) -> dict:
        out = {k: jnp.ones_like(v) for k, v in params.items()}
        for name in self.params:
            if name not in params:
                raise HeadflowError(f"SignFlip(params={self.params!r}): the model has no "
                                    f"parameter {name!r} (it has {sorted(params)})")
            v = params[name]
            i = self.student if self.student is not None else self.teacher
            out[name] = (-out[name] if jnp.ndim(v) == 0
                         else out[name].at[..., i].set(-1.0))
        return out
