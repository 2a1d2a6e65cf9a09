"""Online SGD of the single-location model at finite D (`docs/model.md#training-online-sgd`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

from headflow.dynamics import Model, StepSizes, Teacher, Weights, sample_data


def field_gradients(model: Model, w: Weights, X: Float[Array, "B L D"], y: Float[Array, " B"]):
    """Fields of a batch and the loss gradients with respect to them (local-field chain rule):
    `G^χ = ∂ℓ/∂χ`, `G^z = ∂ℓ/∂z` (each `B×H×L`) and `∂ℓ/∂b`, for the batch-mean loss.
    The loss is [`headflow.dynamics.Model.loss`][], the same code the ODEs differentiate."""
    sqrt_d = jnp.sqrt(jnp.asarray(w.D, X.dtype))
    chi = jnp.einsum("hd,bld->bhl", w.K, X) / sqrt_d
    z = jnp.einsum("hd,bld->bhl", w.V, X) / sqrt_d

    def batch_loss(chi, z, b):
        return jnp.mean(jax.vmap(model.loss, in_axes=(0, 0, None, 0))(chi, z, b, y))

    return jax.grad(batch_loss, argnums=(0, 1, 2))(chi, z, w.b)


def sgd_step(model: Model, hp: StepSizes, teacher: Teacher, w: Weights,
             key: PRNGKeyArray) -> Weights:
    """One online SGD step on a fresh batch: `k_h ← (1 − ηλ/D) k_h − η ∂ℓ/∂k_h` (same for
    `v_h` unless values are frozen), `b_h ← b_h − (η_b/D) ∂ℓ/∂b_h`."""
    D = w.D
    X, y = sample_data(key, teacher, model, hp.batch)
    g_chi, g_z, g_b = field_gradients(model, w, X, y)
    scale = hp.lr / jnp.sqrt(jnp.asarray(D, X.dtype))
    decay = 1.0 - hp.lr * hp.weight_decay / D
    K = decay * w.K - scale * jnp.einsum("bhl,bld->hd", g_chi, X)
    if model.train_values:
        V = decay * w.V - scale * jnp.einsum("bhl,bld->hd", g_z, X)
    else:
        V = w.V
    b = w.b - (hp.lr_bias / D) * g_b
    return Weights(K=K.astype(w.K.dtype), V=V.astype(w.V.dtype), b=b.astype(w.b.dtype))


def advance(model: Model, hp: StepSizes, teacher: Teacher, w: Weights, key: PRNGKeyArray,
            start: Array, n_steps: Array) -> Weights:
    """Steps `start, …, start + n_steps − 1`; step `k` uses `fold_in(key, k)`, so results do not
    depend on how the run is cut into segments, and the step sizes at `t = k/D`
    ([`headflow.dynamics.StepSizes.at`][]: a schedule is read at the time of each step)."""

    def body(k, w):
        return sgd_step(model, hp.at(k / w.D), teacher, w, jr.fold_in(key, k))

    return jax.lax.fori_loop(start, start + n_steps, body, w)
