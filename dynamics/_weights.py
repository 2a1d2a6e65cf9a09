"""Student weights and the order parameters computed from them."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

from ._linalg import psd_sqrt
from ._overlaps import Overlaps
from ._teacher import Teacher


class Weights(eqx.Module):
    """Keys `K` (rows `k_h`), values `V` (rows `v_h`) and biases `b` of H heads in dimension D."""

    K: Float[Array, "H D"]
    V: Float[Array, "H D"]
    b: Float[Array, " H"]

    @property
    def D(self) -> int:
        return self.K.shape[-1]

    def gram_rows(self, teacher: Teacher) -> Float[Array, "H2 P"]:
        """Student rows of the Gram matrix, `[K; V] [K; V; K*; v*]ᵀ / D` (computed in the
        weights' dtype, returned in float64)."""
        students = jnp.concatenate([self.K, self.V], axis=0)
        everything = jnp.concatenate([students, teacher.rows()], axis=0)
        return (students @ everything.T / self.D).astype(jnp.float64)

    def overlaps(self, teacher: Teacher) -> Overlaps:
        """The order parameters (`docs/model.md#order-parameters`), cross overlaps included."""
        return Overlaps.from_student_rows(self.gram_rows(teacher), self.b.astype(jnp.float64),
                                          teacher.kstar.shape[0])


def init_weights(key: PRNGKeyArray, H: int, D: int, *, key_std: float | Float[Array, ""],
                 value_std: float | Float[Array, ""],
                 bias: float | Float[Array, ""], dtype=jnp.float32) -> Weights:
    """`k_h ~ N(0, σ_k² I)`, `v_h ~ N(0, σ_v² I)`, `b_h = b_0`
    (`docs/model.md#training-online-sgd`)."""
    kk, kv = jr.split(key)
    return Weights(K=key_std * jr.normal(kk, (H, D), dtype=dtype),
                   V=value_std * jr.normal(kv, (H, D), dtype=dtype),
                   b=jnp.full((H,), bias, dtype=dtype))


def weights_from_overlaps(key: PRNGKeyArray, ov: Overlaps, teacher: Teacher, rho: float,
                          dtype=jnp.float32) -> Weights:
    """Weights at dimension D whose Gram matrix with the teacher is exactly `ov` (up to
    round-off): the teacher part is fixed by `m, n` and the cross overlaps, the rest is a random
    orthonormal complement (the direction "start the simulation from weights built to have given
    overlaps", `docs/ode.md#theory-versus-simulation`). Needs `D ≥ 3H + F + 1`."""

    H, _F, D = ov.H, ov.F, teacher.D
    T = teacher.rows().astype(jnp.float64)                     # (F+1, D)
    omega = ov.gram(rho)
    st = omega[:2 * H, 2 * H:]                                  # (2H, F+1)
    tt = omega[2 * H:, 2 * H:]
    coef = st @ jnp.linalg.inv(tt)                              # students = coef T + rest
    resid = omega[:2 * H, :2 * H] - coef @ tt @ coef.T          # Gram of the rest
    # orthonormal directions orthogonal to the teacher rows, scaled to norm √D
    g = jr.normal(key, (D, 2 * H), dtype=jnp.float64)
    g = g - T.T @ jnp.linalg.solve(T @ T.T, T @ g)
    basis, _ = jnp.linalg.qr(g)                                  # (D, 2H)
    rest = psd_sqrt(resid) @ basis.T * jnp.sqrt(D)
    students = coef @ T + rest
    return Weights(K=students[:H].astype(dtype), V=students[H:].astype(dtype),
                   b=ov.b.astype(dtype))


def construction_weights(teacher: Teacher, points, biases, dtype=jnp.float32) -> Weights:
    """Heads `k_s = Σ_f θ^s_f k*_f`, `v_s = v*`, `b_s` given (the Bayes-softmax construction of
    `docs/model.md#bayes-optimal-risk-and-the-bayes-softmax-construction` at finite D)."""
    P = jnp.asarray(points, dtype=jnp.float64)
    K = (P @ teacher.kstar.astype(jnp.float64)).astype(dtype)
    V = jnp.broadcast_to(teacher.vstar, K.shape).astype(dtype)
    return Weights(K=K, V=V, b=jnp.asarray(biases, dtype=dtype))
