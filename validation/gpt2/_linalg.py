"""Small helpers: full-precision contractions (no TF32/bf16 on accelerators)."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax


def dot(spec: str, *operands):
    """`jnp.einsum` at `Precision.HIGHEST`."""
    return jnp.einsum(spec, *operands, precision=lax.Precision.HIGHEST)


def safe_sqrt(x):
    """`√max(x, 0)`: squared norms from Gram identities can round slightly below zero."""
    return jnp.sqrt(jnp.maximum(x, 0))
