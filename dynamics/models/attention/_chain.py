"""Online SGD simulated exactly in law in overlap space, at a cost per step independent of D
(`docs/overlap-sgd.md`).

Write `W` for the independent rows `[k_1..k_H, v_1..v_H, k*_1..k*_F, v*]` (without the `v_h`
when values are frozen: they equal `v*`) and `Ω = W Wᵀ/D`. Given `Ω = C Cᵀ`, a token's fields are
`λ = W x/√D = C c` with whitened coordinates `c ~ N(0, I)` (shifted by `Cᵀ e_{K*} θ` on the
signal token), and the token Gram matrix is `x·x' = c·c' + O` with `O ~ Wishart(D − N, I)`
independent of the fields. One SGD step is then an exact map of `(Ω, b)`
([`gram_update`][]), and `(Ω, b)` is a Markov chain at every D.
"""

from __future__ import annotations

from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ..._errors import DivergenceError, HeadflowError, require_x64
from ..._model import AttentionBase
from ..._overlaps import Overlaps
from ..._steps import StepSizes
from ..._wishart import as_float64, bartlett, chi_square, psd_factor
from ...ode._integrate import BLOWUP, bounded
from ...sharding import gather
from .._sgd import AbstractSGD


# -- the rows of W ---------------------------------------------------------------------------------

def n_students(model: AttentionBase) -> int:
    """Student rows that SGD moves: `2H` (keys and values), or `H` when values are frozen."""
    return 2 * model.H if model.train_values else model.H


def n_rows(model: AttentionBase) -> int:
    """`N`, the independent rows of `W`: the students, the `F` teacher keys and `v*`."""
    return n_students(model) + model.F + 1


def _full_rows(model: AttentionBase) -> np.ndarray:
    """For each row of the full layout `[K, V, K*, v*]`, its independent row (frozen values:
    every `v_h` is the row of `v*`)."""
    H, F, s = model.H, model.F, n_students(model)
    values = np.arange(H, 2 * H) if model.train_values else np.full(H, s + F)
    return np.concatenate([np.arange(H), values, s + np.arange(F + 1)])


def _independent_rows(model: AttentionBase) -> np.ndarray:
    """Rows of the full layout `[K, V, K*, v*]` kept as independent rows."""
    H, F = model.H, model.F
    students = np.arange(2 * H) if model.train_values else np.arange(H)
    return np.concatenate([students, 2 * H + np.arange(F + 1)])


def reduce_overlaps(model: AttentionBase, ov: Overlaps
                    ) -> tuple[Float[Array, "N N"], Float[Array, " H"]]:
    """`(Ω, b)` of one state over the independent rows. With frozen values the value blocks of
    `ov` are ignored (`v_h = v*`, as the weight-space simulator sets them)."""
    idx = _independent_rows(model)
    full = ov.gram(model.rho).astype(jnp.float64)
    return full[idx][:, idx], ov.b.astype(jnp.float64)


def expand_overlaps(model: AttentionBase, omega: Float[Array, "N N"],
                    b: Float[Array, " H"]) -> Overlaps:
    """The [`headflow.dynamics.Overlaps`][] (cross overlaps included) of one state `(Ω, b)`."""
    idx = _full_rows(model)
    full = omega[idx][:, idx]
    return Overlaps.from_student_rows(full[:2 * model.H], b, model.F)


# -- random draws ----------------------------------------------------------------------------------

def initial_gram(model: AttentionBase, key: PRNGKeyArray, dim: int | Float[Array, ""], *,
                 key_std: float | Float[Array, ""], value_std: float | Float[Array, ""],
                 bias: float | Float[Array, ""]
                 ) -> tuple[Float[Array, "N N"], Float[Array, " H"]]:
    """A draw of `(Ω, b)` with the exact law at dimension `dim` of the weight-space
    initialization (a uniformly random orthonormal teacher, `k_h ~ N(0, σ_k² I)`,
    `v_h ~ N(0, σ_v² I)`, `b_h = b_0`, values set to `v*` when frozen).

    The students are rotation invariant and independent of the teacher, so in an orthonormal
    frame whose first `F + 1` axes are the teacher's, a student is `σ (z, g⊥)` with
    `z ~ N(0, I_{F+1})`, and the Gram matrix of the `g⊥` is `Wishart(D − F − 1, I)`: drawn by
    Bartlett's decomposition, at a cost independent of D.
    """
    s, F = n_students(model), model.F
    std = jnp.concatenate([jnp.full((model.H,), key_std, jnp.float64),
                           jnp.full((s - model.H,), value_std, jnp.float64)])
    kz, kc, kb = jr.split(key, 3)
    z = jr.normal(kz, (s, F + 1), dtype=jnp.float64)
    df = jnp.asarray(dim, jnp.float64) - (F + 1) - jnp.arange(s)
    T = bartlett(chi_square(kc, df), jr.normal(kb, (s * (s - 1) // 2,), dtype=jnp.float64))
    scale = std[:, None] / jnp.sqrt(jnp.asarray(dim, jnp.float64))
    teacher_axes = jnp.sqrt(jnp.concatenate([jnp.ones(F), jnp.full((1,), model.rho)]))
    coords = jnp.block([[scale * z, scale * T],
                        [jnp.diag(teacher_axes), jnp.zeros((F + 1, s))]])   # W/√D in the frame
    omega = _matmul(coords, coords.T)
    return omega, jnp.full((model.H,), bias, jnp.float64)


# -- one SGD step ----------------------------------------------------------------------------------

def _fields(model: AttentionBase, lam: Float[Array, "B L N"]):
    """`(χ, z, y*)` from the fields of the independent rows: `(B, H, L)` twice and `(B, L)`."""
    H, s = model.H, n_students(model)
    chi = jnp.swapaxes(lam[..., :H], -1, -2)
    ystar = lam[..., s + model.F]
    if model.train_values:
        z = jnp.swapaxes(lam[..., H:2 * H], -1, -2)
    else:
        z = jnp.broadcast_to(ystar[:, None, :], chi.shape)
    return chi, z, ystar


def gram_update(model: AttentionBase, hp: StepSizes, dim: int | Float[Array, ""],
                omega: Float[Array, "N N"], b: Float[Array, " H"], lam: Float[Array, "B L N"],
                tokens: Float[Array, "BL BL"], y: Float[Array, " B"]
                ) -> tuple[Float[Array, "N N"], Float[Array, " H"]]:
    """The exact one-step map of online SGD on `(Ω, b)` (`docs/overlap-sgd.md`).

    With `G_ℓ = ∂ℓ/∂λ_ℓ` (autodiff of the batch-mean [`headflow.dynamics.Model.loss`][]; zero on the
    teacher rows and on frozen values), `M = Σ_ℓ G_ℓ λ_ℓᵀ` and the weight-decay factor
    `d = 1 − ηλ/D` on the student rows (`Dg = diag(d, 1)`):

        Ω' = Dg Ω Dg − (η/D)(M Dg + Dg Mᵀ) + (η²/D²) Σ_ℓℓ' G_ℓ G_ℓ'ᵀ (x_ℓ·x_ℓ')
        b' = b − (η_b/D) ∂ℓ/∂b

    which is `W' Wᵀ'/D` for `W'_s = d W_s − (η/√D) Σ_ℓ G_ℓ x_ℓᵀ`, the weight-space step.

    **Arguments:**

    - `model`, `hp`: the model and the step sizes. `dim`: D.
    - `omega`, `b`: the state, over the independent rows (`n_rows`).
    - `lam`: the fields of the batch's tokens, `λ_{bℓ} = W x_{bℓ}/√D`.
    - `tokens`: their Gram matrix `x_{bℓ}·x_{b'ℓ'}` (flattened batch-major, not divided by D).
    - `y`: the labels.

    **Returns:** `(Ω', b')`.
    """
    B, L, N = lam.shape
    s = n_students(model)
    D = jnp.asarray(dim, jnp.float64)
    chi, z, _ = _fields(model, lam)

    def batch_loss(chi, z, b):
        return jnp.mean(jax.vmap(model.loss, in_axes=(0, 0, None, 0))(chi, z, b, y))

    g_chi, g_z, g_b = jax.grad(batch_loss, argnums=(0, 1, 2))(chi, z, b)
    parts = [jnp.swapaxes(g_chi, -1, -2)]
    if model.train_values:
        parts.append(jnp.swapaxes(g_z, -1, -2))
    parts.append(jnp.zeros((B, L, N - s), lam.dtype))
    G = jnp.concatenate(parts, axis=-1).reshape(B * L, N)
    lam = lam.reshape(B * L, N)

    lr = jnp.asarray(hp.lr, jnp.float64)
    decay = 1.0 - lr * jnp.asarray(hp.weight_decay, jnp.float64) / D
    dg = jnp.where(jnp.arange(N) < s, decay, 1.0)
    M = jnp.sum(G[:, :, None] * lam[:, None, :], axis=0) * dg[None, :]       # M Dg
    TG = jnp.sum(tokens[:, :, None] * G[None, :, :], axis=1)                  # X G
    noise = jnp.sum(G[:, :, None] * TG[:, None, :], axis=0)                   # Gᵀ X G
    omega = (omega * (dg[:, None] * dg[None, :]) - (lr / D) * (M + M.T)
             + (lr / D) ** 2 * noise)
    return omega, b - (jnp.asarray(hp.lr_bias, jnp.float64) / D) * g_b


class ChainState(eqx.Module):
    """One run of the chain: `omega` (Ω over the independent rows), biases `b`, and the first
    step at which Ω failed the check of `headflow.dynamics._wishart.psd_factor` (`fail_step`,
    −1: never)
    with its relative pivot (`fail_pivot`, NaN when Ω was not finite)."""

    omega: Float[Array, "N N"]
    b: Float[Array, " H"]
    fail_step: Int[Array, ""]
    fail_pivot: Float[Array, ""]

    @classmethod
    def start(cls, omega: Float[Array, "N N"], b: Float[Array, " H"]) -> ChainState:
        return cls(omega=omega, b=b, fail_step=jnp.array(-1, jnp.int64),
                   fail_pivot=jnp.array(0.0, jnp.float64))


class StepDraws(eqx.Module):
    """The random numbers of one SGD step of the chain (a leading axis for several steps):
    standard normals `c` (the whitened token coordinates before the signal shift), the latent
    coefficients `theta`, the hidden locations `eps`, the label noise `xi` (standard normals; zero
    when Δ = 0) and the Bartlett factor `T` of the tokens' part orthogonal to span W."""

    c: Float[Array, "*steps B L N"]
    theta: Float[Array, "*steps B F"]
    eps: Int[Array, "*steps B"]
    xi: Float[Array, "*steps B"]
    T: Float[Array, "*steps BL BL"]


def draw_steps(model: AttentionBase, hp: StepSizes, dim: int | Float[Array, ""], key: PRNGKeyArray,
               count: int) -> StepDraws:
    """The random numbers of `count` steps, drawn together (one call per kind: far fewer, larger
    operations than drawing them step by step, which is what the loop overhead on CPU needs)."""
    B, L, N = hp.batch, model.L, n_rows(model)
    n = B * L
    pairs = n * (n - 1) // 2
    noisy = not (isinstance(model.noise, (int, float)) and model.noise == 0)
    kn, kt, ke, kc = jr.split(key, 4)
    g = jr.normal(kn, (count, n * N + pairs + (B if noisy else 0)), dtype=jnp.float64)
    df = jnp.asarray(dim, jnp.float64) - N - jnp.arange(n)
    chi2 = chi_square(kc, jnp.broadcast_to(df[None, :], (count, n)))
    return StepDraws(
        c=g[:, :n * N].reshape(count, B, L, N),
        theta=model.prior.sample(kt, (count, B), dtype=jnp.float64),
        eps=jr.randint(ke, (count, B), 0, L),
        xi=g[:, n * N + pairs:] if noisy else jnp.zeros((count, B), jnp.float64),
        T=jax.vmap(bartlett)(chi2, g[:, n * N:n * N + pairs]))


def apply_step(model: AttentionBase, hp: StepSizes, dim: int | Float[Array, ""], state: ChainState,
               draws: StepDraws, step: Int[Array, ""]) -> ChainState:
    """One online SGD step of the chain, exact in law, from its random numbers: the whitened
    coordinates `c` of the batch's tokens (the signal token, at `eps`, shifted by `Cᵀ e_{K*} θ`),
    the fields `λ = C c`, the labels `y = λ_{v*,ε} + Δ ξ`, the token Gram matrix
    `x·x' = c·c' + T Tᵀ`, then [`gram_update`][]. Records the step in `fail_step` the first
    time Ω fails the check of `headflow.dynamics._wishart.psd_factor`. The step sizes are those at
    `t = step/D` ([`headflow.dynamics.StepSizes.at`][])."""
    hp = hp.at(step / jnp.asarray(dim, jnp.float64))
    L = model.L
    s, F = n_students(model), model.F
    B, _, N = draws.c.shape[-3:]
    C, ok, pivot = psd_factor(state.omega)
    signal = (jnp.arange(L)[None, :] == draws.eps[:, None]).astype(jnp.float64)   # (B, L)
    shift = jnp.sum(draws.theta[:, :, None] * C[None, s:s + F, :], axis=1)       # (B, N)
    c = draws.c + signal[:, :, None] * shift[:, None, :]
    lam = jnp.sum(c[:, :, None, :] * C[None, None, :, :], axis=-1)                # λ = C c
    y = jnp.sum(signal * lam[..., s + F], axis=-1) + model.noise * draws.xi
    cf, T = c.reshape(B * L, N), draws.T
    tokens = (jnp.sum(cf[:, None, :] * cf[None, :, :], axis=-1)
              + jnp.sum(T[:, None, :] * T[None, :, :], axis=-1))
    omega, b = gram_update(model, hp, dim, state.omega, state.b, lam, tokens, y)
    first = (state.fail_step < 0) & ~ok
    return ChainState(omega=omega, b=b, fail_step=jnp.where(first, step, state.fail_step),
                      fail_pivot=jnp.where(first, pivot, state.fail_pivot))


def advance(model: AttentionBase, hp: StepSizes, dim: int | Float[Array, ""], state: ChainState,
            key: PRNGKeyArray, start: Int[Array, ""], n_steps: Int[Array, ""], *,
            block: int) -> ChainState:
    """Steps `start, …, start + n_steps − 1`. The random numbers come in blocks of `block`
    steps aligned on multiples of `block`: block `j` (steps `j·block …`) is drawn from
    `fold_in(key, j)`, so a run does not depend on how it is cut into segments (a block cut by
    a save point is drawn again, identically, by the next segment)."""
    end = start + n_steps
    first = start // block
    last = jnp.where(n_steps > 0, (end + block - 1) // block, first)

    def one_block(j, st):
        draws = draw_steps(model, hp, dim, jr.fold_in(key, j), block)
        lo = jnp.maximum(start - j * block, 0)
        hi = jnp.minimum(end - j * block, block)

        def one(o, st):
            d = jax.tree.map(lambda x: x[o], draws)
            return apply_step(model, hp, dim, st, d, j * block + o)

        return jax.lax.fori_loop(lo, hi, one, st)

    return jax.lax.fori_loop(first, last, one_block, state)


@eqx.filter_jit
def _segment(model: AttentionBase, hp: StepSizes, dim, states: ChainState, keys, starts, counts,
             block: int):
    def one_seed(state, key):
        def body(state, sc):
            state = advance(model, hp, dim, state, key, sc[0], sc[1], block=block)
            return state, (state.omega, state.b)

        return jax.lax.scan(body, state, (starts, counts))

    return jax.vmap(one_seed)(states, keys)


# -- runs over seeds -------------------------------------------------------------------------------

def _failure(model: AttentionBase, hp: StepSizes, dim: int, seed: int, step: int,
             pivot: float) -> DivergenceError:
    where = f"seed {seed}, D={dim}"
    t = f"t = {step / dim:.6g} (step {step})"
    if not np.isfinite(pivot):
        return DivergenceError(
            f"SGD in overlap space diverged ({where}): overlaps became NaN/inf or exceeded "
            f"{BLOWUP:.0e} at {t}; try a smaller training.lr (now {float(hp.lr):g})")
    return DivergenceError(
        f"SGD in overlap space ({where}): the Gram matrix of the weights is not positive "
        f"semi-definite at {t} (relative Cholesky pivot {pivot:.3g})")


class AttentionChainSGD(AbstractSGD):
    """The attention model's online SGD simulated exactly in law through its overlaps
    (`docs/overlap-sgd.md`), at a cost per step independent of `dim`, in float64.

    **Fields:** `model`, `hp` (the step sizes), `dim` (D, at least `N + B·L + 1`), `init`
    (`None`: a draw of the exact finite-D law of the random initialization with
    `init_std = (σ_k, σ_v, b_0)`, `initial_gram`; overlaps with a leading seed axis; or a
    callable `init(key) -> Overlaps`; with frozen values the value blocks are ignored),
    `block` (steps whose random numbers are drawn together: part of the random stream, so the
    same seeds give the same run for the same `block`)."""

    model: AttentionBase
    hp: StepSizes
    dim: int = eqx.field(static=True)
    init: Any = None
    init_std: tuple[float, float, float] = eqx.field(static=True, default=(0.1, 0.1, 0.0))
    block: int = eqx.field(static=True, default=128)
    desc: ClassVar[str] = "SGD (overlaps)"

    def __check_init__(self):
        N, n_tok = n_rows(self.model), self.hp.batch * self.model.L
        if self.dim < N + n_tok + 1:
            raise HeadflowError(f"overlap-space SGD needs D >= N + B·L + 1 = {N + n_tok + 1} "
                                f"(got D = {self.dim})")

    def start(self, keys, seeds):
        require_x64("the overlap-space SGD simulator")
        model, init, n = self.model, self.init, keys.shape[0]
        D = jnp.asarray(self.dim, jnp.float64)
        if init is None:
            omega, b = _initial_states(model, keys[:, 1], D, *(jnp.asarray(x, jnp.float64)
                                                                for x in self.init_std))
        elif isinstance(init, Overlaps):
            omega, b = _reduce_states(model, init)
        else:
            omega, b = _reduce_states(model, jax.vmap(init)(keys[:, 1]))
        N = n_rows(model)
        if omega.shape != (n, N, N):
            raise HeadflowError(f"initial overlaps: expected a leading seed axis of {n}, "
                                f"got Gram matrices of shape {omega.shape}")
        ok, pivot = _check_states(omega)
        if not bool(jnp.all(ok)):
            i = int(np.argmin(np.asarray(ok)))
            raise _failure(model, self.hp, self.dim, seeds[i], 0, float(pivot[i]))
        return jax.vmap(ChainState.start)(omega, b), keys[:, 2]

    def segment(self, carry, data, starts, counts):
        return _segment(self.model, as_float64(self.hp), jnp.asarray(self.dim, jnp.float64),
                        carry, data, starts, counts, self.block)

    def check(self, carry, recorded, t_end: float, seeds: list[int]) -> None:
        om, bb = recorded
        n = len(seeds)
        fail_step, fail_pivot, bb = gather((carry.fail_step, carry.fail_pivot, bb), n)
        fail = np.asarray(fail_step)
        # reduced where the overlaps live: only one flag per seed is collected
        bad = ~np.asarray(bounded(bb, axis=(1, 2)) & gather(bounded(om, axis=(1, 2, 3)), n))
        if np.any(fail >= 0):
            j = int(np.argmin(np.where(fail >= 0, fail, np.iinfo(np.int64).max)))
            raise _failure(self.model, self.hp, self.dim, seeds[j], int(fail[j]),
                           float(np.asarray(fail_pivot)[j]))
        if np.any(bad):
            raise _failure(self.model, self.hp, self.dim, seeds[int(np.argmax(bad))],
                           int(round(t_end * self.dim)), float("nan"))

    def states(self, recorded) -> Overlaps:
        omega, b = recorded
        return _expand_states(self.model, omega, b)


@eqx.filter_jit
def _initial_states(model: AttentionBase, keys, dim, key_std, value_std, bias):
    return jax.vmap(lambda k: initial_gram(model, k, dim, key_std=key_std, value_std=value_std,
                                           bias=bias))(keys)


@eqx.filter_jit
def _reduce_states(model: AttentionBase, ov: Overlaps):
    return jax.vmap(lambda o: reduce_overlaps(model, o))(ov)


@jax.jit
def _check_states(omega):
    _, ok, pivot = jax.vmap(psd_factor)(omega)
    return ok, pivot


@eqx.filter_jit
def _expand_states(model: AttentionBase, omega, b) -> Overlaps:
    return jax.vmap(jax.vmap(lambda o, bb: expand_overlaps(model, o, bb)))(omega, b)


def _matmul(a: Float[Array, "i j"], b: Float[Array, "j k"]) -> Float[Array, "i k"]:
    """`a @ b` for tiny matrices as a broadcast sum (faster than a batched product under `vmap`
    on CPU)."""
    return jnp.sum(a[:, :, None] * b[None, :, :], axis=1)
