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

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray

from headflow.dynamics import (DivergenceError, HeadflowError, Model, Overlaps, StepSizes,
                               require_x64)
from headflow.dynamics.ode import BLOWUP, bounded
from headflow.dynamics.sharding import gather

from .._runs import run_segments, save_steps, seed_keys
from .._wishart import as_float64, bartlett, chi_square, psd_factor


# -- the rows of W ---------------------------------------------------------------------------------

def n_students(model: Model) -> int:
    """Student rows that SGD moves: `2H` (keys and values), or `H` when values are frozen."""
    return 2 * model.H if model.train_values else model.H


def n_rows(model: Model) -> int:
    """`N`, the independent rows of `W`: the students, the `F` teacher keys and `v*`."""
    return n_students(model) + model.F + 1


def _full_rows(model: Model) -> np.ndarray:
    """For each row of the full layout `[K, V, K*, v*]`, its independent row (frozen values:
    every `v_h` is the row of `v*`)."""
    H, F, s = model.H, model.F, n_students(model)
    values = np.arange(H, 2 * H) if model.train_values else np.full(H, s + F)
    return np.concatenate([np.arange(H), values, s + np.arange(F + 1)])


def _independent_rows(model: Model) -> np.ndarray:
    """Rows of the full layout `[K, V, K*, v*]` kept as independent rows."""
    H, F = model.H, model.F
    students = np.arange(2 * H) if model.train_values else np.arange(H)
    return np.concatenate([students, 2 * H + np.arange(F + 1)])


def reduce_overlaps(model: Model, ov: Overlaps) -> tuple[Float[Array, "N N"], Float[Array, " H"]]:
    """`(Ω, b)` of one state over the independent rows. With frozen values the value blocks of
    `ov` are ignored (`v_h = v*`, as the weight-space simulator sets them)."""
    idx = _independent_rows(model)
    full = ov.gram(model.rho).astype(jnp.float64)
    return full[idx][:, idx], ov.b.astype(jnp.float64)


def expand_overlaps(model: Model, omega: Float[Array, "N N"], b: Float[Array, " H"]) -> Overlaps:
    """The [`headflow.dynamics.Overlaps`][] (cross overlaps included) of one state `(Ω, b)`."""
    idx = _full_rows(model)
    full = omega[idx][:, idx]
    return Overlaps.from_student_rows(full[:2 * model.H], b, model.F)


# -- random draws ----------------------------------------------------------------------------------

def initial_gram(model: Model, key: PRNGKeyArray, dim: int | Float[Array, ""], *,
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

def _fields(model: Model, lam: Float[Array, "B L N"]):
    """`(χ, z, y*)` from the fields of the independent rows: `(B, H, L)` twice and `(B, L)`."""
    H, s = model.H, n_students(model)
    chi = jnp.swapaxes(lam[..., :H], -1, -2)
    ystar = lam[..., s + model.F]
    if model.train_values:
        z = jnp.swapaxes(lam[..., H:2 * H], -1, -2)
    else:
        z = jnp.broadcast_to(ystar[:, None, :], chi.shape)
    return chi, z, ystar


def gram_update(model: Model, hp: StepSizes, dim: int | Float[Array, ""],
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
    step at which Ω failed the check of `headflow.sims._wishart.psd_factor` (`fail_step`, −1: never)
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


def draw_steps(model: Model, hp: StepSizes, dim: int | Float[Array, ""], key: PRNGKeyArray,
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


def apply_step(model: Model, hp: StepSizes, dim: int | Float[Array, ""], state: ChainState,
               draws: StepDraws, step: Int[Array, ""]) -> ChainState:
    """One online SGD step of the chain, exact in law, from its random numbers: the whitened
    coordinates `c` of the batch's tokens (the signal token, at `eps`, shifted by `Cᵀ e_{K*} θ`),
    the fields `λ = C c`, the labels `y = λ_{v*,ε} + Δ ξ`, the token Gram matrix
    `x·x' = c·c' + T Tᵀ`, then [`gram_update`][]. Records the step in `fail_step` the first
    time Ω fails the check of `headflow.sims._wishart.psd_factor`. The step sizes are those at
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


def advance(model: Model, hp: StepSizes, dim: int | Float[Array, ""], state: ChainState,
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
def _segment(model: Model, hp: StepSizes, dim, states: ChainState, keys, starts, counts,
             block: int):
    def one_seed(state, key):
        def body(state, sc):
            state = advance(model, hp, dim, state, key, sc[0], sc[1], block=block)
            return state, (state.omega, state.b)

        return jax.lax.scan(body, state, (starts, counts))

    return jax.vmap(one_seed)(states, keys)


# -- runs over seeds -------------------------------------------------------------------------------

def _failure(model: Model, hp: StepSizes, dim: int, seed: int, step: int,
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


def simulate_overlaps(model: Model, hp: StepSizes, *, dim: int, seeds, times,
                      init: Overlaps | Callable[[PRNGKeyArray], Overlaps] | None = None,
                      init_std: tuple[float, float, float] = (0.1, 0.1, 0.0),
                      progress: bool = False, segments: int = 20, block: int = 128
                      ) -> Overlaps:
    """Online SGD simulated exactly in law through its overlaps (`docs/overlap-sgd.md`): the
    counterpart of [`headflow.sims.attention.simulate`][] at a cost per step independent of `dim`,
    in float64.

    **Arguments:**

    - `model`, `hp`: the model and the SGD step sizes (learning rates, weight decay, batch).
    - `dim`: D (at least `N + B·L + 1`, `n_rows`). `seeds`: a list of ints (one
      independent run each; the same seed gives the same run, bit for bit).
    - `times`: save times in `t = steps/D`, recorded after `round(t·D)` steps exactly as
      [`headflow.sims.attention.simulate`][] does (0 = the initial state).
    - `init`: `None` (a draw of the exact finite-D law of the random initialization with
      `init_std = (σ_k, σ_v, b_0)`, `initial_gram`), overlaps with a leading seed axis, or a
      callable `init(key) -> Overlaps` (e.g. `headflow.dynamics.models.attention.random_start` of
      actual weights).
      With frozen values the value blocks of the initial overlaps are ignored (`v_h = v*`).
    - `progress`: a progress bar on stderr. `segments`: device calls the run is cut into
      (failures are checked after each; the results do not depend on it).
    - `block`: steps whose random numbers are drawn together (speed; it is part of the random
      stream, so the same seeds give the same run for the same `block`).

    **Returns:** the [`headflow.dynamics.Overlaps`][] (cross overlaps included) with leaves `(S, T,
    ...)`.

    **Raises:** [`headflow.dynamics.DivergenceError`][] (one line, naming the seed and time) when
    the overlaps become NaN/inf, exceed `headflow.dynamics.ode.BLOWUP` or stop being a valid Gram
    matrix; [`headflow.dynamics.HeadflowError`][] when float64 is off or `dim` is too small.
    """
    require_x64("the overlap-space SGD simulator")
    dim = int(dim)
    N, n_tok = n_rows(model), hp.batch * model.L
    if dim < N + n_tok + 1:
        raise HeadflowError(f"overlap-space SGD needs D >= N + B·L + 1 = {N + n_tok + 1} "
                            f"(got D = {dim})")
    seeds = [int(s) for s in seeds]
    steps_at = save_steps(np.asarray(times, dtype=np.float64).reshape(-1), dim)
    if len(steps_at) == 0 or steps_at[0] < 0:
        raise HeadflowError("times must be a non-empty list of save times >= 0")
    ks = jnp.stack([seed_keys(s) for s in seeds])                       # (S, 3)
    D = jnp.asarray(dim, jnp.float64)
    if init is None:
        omega, b = _initial_states(model, ks[:, 1], D, *(jnp.asarray(x, jnp.float64)
                                                          for x in init_std))
    elif isinstance(init, Overlaps):
        omega, b = _reduce_states(model, init)
    else:
        omega, b = _reduce_states(model, jax.vmap(init)(ks[:, 1]))
    if omega.shape != (len(seeds), N, N):
        raise HeadflowError(f"initial overlaps: expected a leading seed axis of {len(seeds)}, "
                            f"got Gram matrices of shape {omega.shape}")
    ok, pivot = _check_states(omega)
    if not bool(jnp.all(ok)):
        i = int(np.argmin(np.asarray(ok)))
        raise _failure(model, hp, dim, seeds[i], 0, float(pivot[i]))

    hp = as_float64(hp)
    states = jax.vmap(ChainState.start)(omega, b)
    n = len(seeds)

    def segment(states, keys, starts, counts):
        return _segment(model, hp, D, states, keys, starts, counts, block)

    def check(states, recorded, t_end: float) -> None:
        om, bb = recorded
        fail_step, fail_pivot, bb = gather((states.fail_step, states.fail_pivot, bb), n)
        fail = np.asarray(fail_step)
        # reduced where the overlaps live: only one flag per seed is collected
        bad = ~np.asarray(bounded(bb, axis=(1, 2)) & gather(bounded(om, axis=(1, 2, 3)), n))
        if np.any(fail >= 0):
            j = int(np.argmin(np.where(fail >= 0, fail, np.iinfo(np.int64).max)))
            raise _failure(model, hp, dim, seeds[j], int(fail[j]),
                           float(np.asarray(fail_pivot)[j]))
        if np.any(bad):
            raise _failure(model, hp, dim, seeds[int(np.argmax(bad))], int(round(t_end * dim)),
                           float("nan"))

    _, (omegas, biases) = run_segments(segment, states, ks[:, 2], steps_at, dim=dim, seeds=n,
                                       segments=segments, check=check, progress=progress,
                                       desc="SGD (overlaps)")
    omega_all, bias_all = gather((omegas, biases), n)
    return _expand_states(model, omega_all, bias_all)


@eqx.filter_jit
def _initial_states(model: Model, keys, dim, key_std, value_std, bias):
    return jax.vmap(lambda k: initial_gram(model, k, dim, key_std=key_std, value_std=value_std,
                                           bias=bias))(keys)


@eqx.filter_jit
def _reduce_states(model: Model, ov: Overlaps):
    return jax.vmap(lambda o: reduce_overlaps(model, o))(ov)


@jax.jit
def _check_states(omega):
    _, ok, pivot = jax.vmap(psd_factor)(omega)
    return ok, pivot


@eqx.filter_jit
def _expand_states(model: Model, omega, b) -> Overlaps:
    return jax.vmap(jax.vmap(lambda o, bb: expand_overlaps(model, o, bb)))(omega, b)


def _matmul(a: Float[Array, "i j"], b: Float[Array, "j k"]) -> Float[Array, "i k"]:
    """`a @ b` for tiny matrices as a broadcast sum (faster than a batched product under `vmap`
    on CPU)."""
    return jnp.sum(a[:, :, None] * b[None, :, :], axis=1)
