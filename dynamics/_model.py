"""The student model (`docs/model.md#the-student-attention-heads`): one layer of H attention heads,
no output projection.

These functions are *the* predictor: the simulator evaluates them on actual fields `X k_h/√D`,
the ODEs on sampled Gaussian fields, so theory and simulation can never disagree about the model.
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Scalar

from ._errors import ConfigError, HeadflowError
from ._layout import ATTENTION, Layout
from ._overlaps import Overlaps
from ._value_moments import SIGNAL as SIGNAL
from ._value_moments import ValueMoments as ValueMoments
from .activations import AbstractActivation
from .measures import head_spread
from .priors import AbstractPrior



class AttentionBase(eqx.Module):
    """The single-location model: data (prior, noise, `ρ*`) and the student's architecture.

    **Fields:** `L` tokens, `H` heads, `F` latent directions (those of the `prior`),
    `activation`, `prior`, label noise `noise` (Δ), `rho` (`|v*|²/D`), `train_values` (False:
    `v_h` frozen to `v*`).
    """

    L: int = eqx.field(static=True)
    H: int = eqx.field(static=True)
    F: int = eqx.field(static=True)
    activation: AbstractActivation
    prior: AbstractPrior
    noise: float = 0.0
    rho: float = 1.0
    train_values: bool = eqx.field(static=True, default=True)

    def __check_init__(self) -> None:
        if self.F != self.prior.F:
            raise ConfigError(f"model.F = {self.F}: the prior has F = {self.prior.F} latent "
                              "directions")

    layout: ClassVar[Layout] = ATTENTION
    """The layout of the attention model's order parameters ([`headflow.dynamics.Layout`][])."""

    def escape_observable(self, named) -> object:
        """The observable whose crossing of the escape threshold is the escape (as for the
        family, `headflow.dynamics.models.AbstractModel.escape_observable`): the head spread
        of `m`, `q` ([`headflow.dynamics.measures.head_spread`][]; batch axes kept)."""
        return head_spread(named["m"], named["q"])

    def named(self, ov) -> dict:
        """The named order parameters of a state (`m`, `q`, ... as numpy arrays: the `ode.npz`
        arrays)."""
        return ov.arrays()

    def check_state(self, state, *, what: str = "initial overlaps", tol: float = 1e-9) -> None:
        """One-line errors for an unusable state: wrong shapes, non-PSD overlaps (smallest
        eigenvalue below `−tol` times the scale)."""
        ov = state
        if not isinstance(ov, Overlaps):
            raise HeadflowError(f"{what}: the attention model's state is an Overlaps, not a "
                                f"{type(ov).__name__}")
        H, F = self.H, self.F
        want = {"m": (H, F), "q": (H, H), "n": (H,), "s": (H, H), "b": (H,), "kv": (H, H),
                "kvs": (H,), "vks": (H, F)}
        for name, shape in want.items():
            got = tuple(getattr(ov, name).shape)
            if got != shape:
                raise HeadflowError(f"{what}: {name} has shape {got} but the config has "
                                    f"H={H}, F={F} (expected {shape}); build the state for this "
                                    "config")
        ov.check_psd(self.rho, what=what, tol=tol)

    def attention(self, chi: Float[Array, "heads tokens"],
                  b: Float[Array, " heads"]) -> Float[Array, "heads tokens"]:
        """`A = σ(χ + b)`."""
        return self.activation(chi, b)

    def predict(self, chi: Float[Array, "heads tokens"], z: Float[Array, "heads tokens"],
                b: Float[Array, " heads"]) -> Scalar:
        """`ŷ = Σ_h Σ_ℓ A_{hℓ} z_{hℓ}` (heads summed, no 1/H)."""
        return jnp.sum(self.attention(chi, b) * z)

    def loss(self, chi: Float[Array, "heads tokens"], z: Float[Array, "heads tokens"],
             b: Float[Array, " heads"], y: Scalar) -> Scalar:
        """Per-sample loss `ℓ = ½(ŷ − y)²`."""
        return 0.5 * (self.predict(chi, z, b) - y) ** 2

    def conditional_error(self, chi: Float[Array, "heads tokens"], b: Float[Array, " heads"],
                          value_moments: ValueMoments) -> Scalar:
        """`E[(ŷ − y)² | key fields]`: the value fields and the label noise integrated out.

        Given the key fields the value fields `z_ℓ` (per token) and the teacher's value field
        `y*_ℓ` are Gaussian with means `mz[:, ℓ]`, `my` (signal token) and covariances
        `szz, szy, syy`, independent across tokens; then
        `E[(ŷ−y)²|keys] = (Σ_ℓ A_ℓ·mz_ℓ − my)² + Σ_ℓ A_ℓᵀ szz A_ℓ − 2 A_1·szy + syy + Δ²`.
        On the invariant manifold `mz = 0, my = 0, szz = s, szy = n, syy = ρ*`, which gives the
        `docs/model.md#population-risk` risk integrand.
        """
        A = self.attention(chi, b)
        vm = value_moments
        mean = jnp.sum(A * vm.mz) - vm.my
        # written as broadcasts: inside vmap, tiny matmuls are slow on CPU
        quad = jnp.sum(A[:, None, :] * vm.szz[:, :, None] * A[None, :, :])
        var = quad - 2.0 * jnp.sum(A[:, SIGNAL] * vm.szy) + vm.syy
        return mean**2 + var + self.noise**2
