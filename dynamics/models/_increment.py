"""The per-sample increment of a model's order parameters and its exact mean
(`docs/models.md#the-engine`): written once, for every model.

One online SGD step on a fresh input moves the student rows by
`w_i ← (1 − ηλ/D) w_i − (η/√D) G_i x` with `G_i = ∂ℓ/∂λ_i` (autodiff of the model's loss in its
fields) and the trained scalar parameters by `p ← p − (η_p/D) ∂ℓ/∂p`. D times the change of
`(Ω, params)` is then, as `|x|²/D → 1`,

- `U_{ij} = −η (G_i λ_j + G_j λ_i) + (η²/B) G_i G_j − 2ηλ Ω_{ij}` (student rows i, j),
- `U_{in} = −η G_i λ*_n − ηλ Ω_{in}` (student i, teacher n), `U_{nm} = 0`,
- `U_p = −η_p ∂ℓ/∂p`.

For a [`spherical`][headflow.dynamics.models.ModelBase.spherical] model, whose students are
put back on `|w_i|² = D` after every step, the projection `Ω_ab → Ω_ab/√(Q_aa Q_bb)` (over the
student rows) adds, to first order in `1/D` and with `Q_ii = 1`,

- `U_ab → U_ab − ½ Ω_ab (U_aa + U_bb)` (`U_aa` counted for student rows only), so `U_ii = 0`
  and `U_in = −η G_i λ*_n + ½ R_in (2η G_i λ_i − η² G_i²)`.

Its mean over the Gaussian fields is the drift of the ODE, its covariance the diffusion of the
SDE. [`assemble`][] builds `U` (or its mean) from the moments `E[G λᵀ]`, `E[G Gᵀ]` and
`E[∂ℓ/∂p]`, whether they come from one sample ([`sample_increment`][]) or from closed forms
([`exact_moments`][]).
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._steps import StepSizes
from ..units._tables import grid, pair_index, pairs, sub
from ._base import GramState, ModelBase


def assemble(model: ModelBase, steps: StepSizes, state: GramState,
             GL: Float[Array, "S P"], GG: Float[Array, "S S"], gparams: Mapping[str, Array], *,
             sgd_noise: bool = True) -> GramState:
    """The increment `U` (or its mean) from `GL = G λᵀ`, `GG = G Gᵀ` and the parameter
    gradients `gparams` (or their expectations)."""
    S = model.n_students
    eta, wd = steps.lr, steps.weight_decay
    om = state.gram
    rows = -eta * GL - (eta * wd) * om[:S]
    ss = rows[:, :S] + rows[:, :S].T
    if sgd_noise:
        ss = ss + (eta**2 / steps.batch) * GG
    st = rows[:, S:]
    d = jnp.zeros_like(om).at[:S, :S].set(ss).at[:S, S:].set(st).at[S:, :S].set(st.T)
    if model.spherical:
        u = jnp.zeros(om.shape[-1], om.dtype).at[:S].set(jnp.diagonal(ss))
        d = d - 0.5 * (u[:, None] + u[None, :]) * om
    dparams = {k: (-steps.lr_bias * gparams[k] if k in model.trained else jnp.zeros_like(v))
               for k, v in state.params.items()}
    return GramState(gram=d, params=dparams)


def sample_gradients(model: ModelBase, params: Mapping[str, Array],
                     lam: Float[Array, " P"], xi: Float[Array, ""]
                     ) -> tuple[Float[Array, " S"], dict[str, Array]]:
    """`(G, ∂ℓ/∂params)` of one sample, `G_i = ∂ℓ/∂λ_i` (autodiff of the model's loss), from
    the fields `lam` of all rows (students first) and the label noise's standard normal `xi`:
    the one place where theory and both simulators differentiate the model."""
    S = model.n_students
    y = model.target(params, lam[S:]) + model.noise * xi
    gp, G = jax.grad(model.loss, argnums=(0, 1))(params, lam[:S], y)
    return G, gp


def sample_increment(model: ModelBase, steps: StepSizes, state: GramState,
                     lam: Float[Array, " P"], xi: Float[Array, ""], *,
                     sgd_noise: bool = True) -> GramState:
    """`U` for one sample: the fields `lam` of all rows (students first) and the label noise's
    standard normal `xi`."""
    G, gp = sample_gradients(model, state.params, lam, xi)
    return assemble(model, steps, state, G[:, None] * lam[None, :], G[:, None] * G[None, :],
                    gp, sgd_noise=sgd_noise)


def exact_moments(model: ModelBase, state: GramState, *, sgd_noise: bool = True
                  ) -> tuple[Array, Array, dict[str, Array]]:
    """`(E[G λᵀ], E[G Gᵀ], E[∂ℓ/∂p])` in closed form for a model with a [`Readout`][]
    structure whose unit gives the integrals `I2, I3, I4, J2` (`docs/committee.md`). With
    `c` the student's and `c*` the teacher's readout, `w = (c, −c*)` over all units and
    `Δ = Σ_a w_a g(λ_a) + σζ`:

    - `E[G_i λ_j] = c_i Σ_a w_a I3(i, j, a)`,
    - `E[G_i G_k] = c_i c_k (Σ_ab w_a w_b I4(i, k, a, b) + σ² J2(i, k))`,
    - `E[∂ℓ/∂c_i] = Σ_a w_a I2(i, a)`.
    """
    ro = model.readout(state.params)
    if ro is None or not ro.unit.exact:
        raise ValueError("exact expectations need a readout model with a unit of closed-form "
                         "integrals")
    S, P = model.n_students, model.n_rows
    C = state.gram
    w = jnp.concatenate([ro.student, -ro.teacher])
    c = ro.student
    i3 = ro.unit.i3_table(C, S)                                    # (S, P, P)
    GL = c[:, None] * jnp.einsum("ija,a->ij", i3, w)
    if sgd_noise:
        # I4(i, k, a, b) and J2(i, k) are symmetric in (i, k) and I4 in (a, b): each is
        # evaluated once per unordered pair, and an off-diagonal (a, b) counts twice
        ab, pos = pairs(P), pair_index(S)
        i4 = ro.unit.i4_pairs(C, S)                                # (S(S+1)/2, P(P+1)/2)
        wab = w[ab[:, 0]] * w[ab[:, 1]] * np.where(ab[:, 0] == ab[:, 1], 1.0, 2.0)
        j2 = ro.unit.j2(sub(C, pairs(S)))
        GG = (c[:, None] * c[None, :]) * (i4 @ wab + model.noise**2 * j2)[pos]
    else:
        GG = jnp.zeros((S, S), C.dtype)
    gparams = {k: jnp.zeros_like(v) for k, v in state.params.items()}
    if ro.param is not None:
        i2 = ro.unit.i2(sub(C, grid(S, P)))                        # (S, P)
        gparams[ro.param] = i2 @ w
    return GL, GG, gparams
