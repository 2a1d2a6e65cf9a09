"""Online SGD of a model of the family (`docs/models.md`) at finite D, as exact maps in weight
space and, exactly in law, in overlap space: [`AbstractSGD`][], the interface that the driver of
`headflow.sims` runs for every model, and the family's two, [`WeightSGD`][] and [`ChainSGD`][]
(a model's `sgd` method picks one).

Both maps draw the fields of a fresh input and differentiate the model's own loss with
[`sample_gradients`][headflow.dynamics.models.sample_gradients], the code the theory averages.
One step on a batch of B inputs `x_b ~ N(0, I_D)` moves the student rows and the trained
scalar parameters by

    w ← (1 − ηλ/D) w − (η/(B√D)) Σ_b G_b x_b,      p ← p − (η_p/(BD)) Σ_b ∂ℓ_b/∂p,

and then, for a spherical model, `w_i ← √D w_i/|w_i|`.

In overlap space (`docs/overlap-sgd.md`) the fields of all rows are `λ_b = C c_b` with
`Ω = C Cᵀ` and `c_b ~ N(0, I_P)`, and `x_b·x_b' = c_b·c_b' + O_bb'` with
`O ~ Wishart(D − P, I_B)` independent of them, so the step is an exact map of `(Ω, params)`.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int, Key, PRNGKeyArray

from .._errors import DivergenceError, HeadflowError, require_x64
from .._steps import StepSizes
from .._wishart import as_float64, bartlett, chi_square, psd_factor
from ..ode._integrate import BLOWUP, bounded
from ..sharding import gather
from ._base import GramState, ModelBase, ModelWeights, sphere_rows
from ._increment import sample_gradients


class AbstractSGD(eqx.Module):
    """Online SGD of one model in one space, as the exact maps a driver runs over seeds
    (`headflow.sims`: it cuts the run into compiled segments, shards the seeds over the
    devices, honours a stop request, draws the progress bar and calls [`check`][] after each
    segment). A model's `sgd` method returns one: the family's are [`WeightSGD`][] and
    [`ChainSGD`][]; the attention model's are in `headflow.dynamics.models.attention`.

    Every seed has three keys, `(teacher, init, data)`; step `k` of a seed draws its data
    from its data key and `k` alone, so a run does not depend on how it is cut into
    segments."""

    dim: eqx.AbstractVar[int]
    desc: ClassVar[str] = "SGD"
    """The progress bar's label."""

    @abc.abstractmethod
    def start(self, keys: Key[Array, "S 3"], seeds: list[int]) -> tuple[Any, Any]:
        """`(carry, data)` of every seed of `seeds` (leading axis S) from its keys: the state
        that a segment advances, and what it reads without changing it."""

    @abc.abstractmethod
    def segment(self, carry: Any, data: Any, starts: Int[Array, " n"],
                counts: Int[Array, " n"]) -> tuple[Any, Any]:
        """`(carry, recorded)`: every seed advanced by `counts[i]` steps from step
        `starts[i]`, recording after each (leaves `(S, n, ...)`)."""

    @abc.abstractmethod
    def check(self, carry: Any, recorded: Any, t_end: float, seeds: list[int]) -> None:
        """Raise a one-line [`headflow.dynamics.DivergenceError`][] naming the seed when a
        run failed by `t_end` (NaN, blow-up, a Gram matrix that stopped being PSD)."""

    @abc.abstractmethod
    def states(self, recorded: Any) -> Any:
        """The states at the save times (leaves `(S, T, ...)`) from everything recorded,
        gathered."""


def batch_gradients(model: ModelBase, params, lam: Float[Array, "B P"],
                    xi: Float[Array, " B"]) -> tuple[Float[Array, "B S"], dict[str, Array]]:
    """Per-sample `(G, ∂ℓ/∂params)` of a batch (leading axis B)."""
    return jax.vmap(lambda la, x: sample_gradients(model, params, la, x))(lam, xi)


def _param_step(model: ModelBase, hp: StepSizes, params, gp, D):
    return {k: (v - (hp.lr_bias / D) * jnp.mean(gp[k], axis=0) if k in model.trained else v)
            for k, v in params.items()}


# -- weight space ----------------------------------------------------------------------------------

def weight_step(model: ModelBase, hp: StepSizes, w: ModelWeights, key: PRNGKeyArray
                ) -> ModelWeights:
    """One online SGD step of the weights on a fresh batch."""
    D = w.D
    dtype = w.students.dtype
    kx, kn = jr.split(key)
    X = jr.normal(kx, (hp.batch, D), dtype=dtype)
    xi = jr.normal(kn, (hp.batch,), dtype=dtype)
    sqrt_d = jnp.sqrt(jnp.asarray(D, dtype))
    rows = jnp.concatenate([w.students, w.teachers])
    lam = X @ rows.T / sqrt_d                                          # (B, P)
    G, gp = batch_gradients(model, w.params, lam, xi)
    decay = 1.0 - hp.lr * hp.weight_decay / D
    students = decay * w.students - (hp.lr / (hp.batch * sqrt_d)) * (G.T @ X)
    if model.spherical:
        students = sphere_rows(students)
    params = _param_step(model, hp, w.params, gp, D)
    return ModelWeights(students=students.astype(dtype), teachers=w.teachers,
                        params={k: v.astype(w.params[k].dtype) for k, v in params.items()})


# -- overlap space ---------------------------------------------------------------------------------

class ChainState(eqx.Module):
    """One run of the chain: the state and the first step at which Ω failed
    [`psd_factor`][]'s check (`fail_step`, −1: never)."""

    state: GramState
    fail_step: Array


def chain_step(model: ModelBase, hp: StepSizes, dim, cs: ChainState, key: PRNGKeyArray,
               step) -> ChainState:
    """One online SGD step of `(Ω, params)`, exact in law."""
    st = cs.state
    B, P, S = hp.batch, model.n_rows, model.n_students
    D = jnp.asarray(dim, jnp.float64)
    kc, kn, kw, kb = jr.split(key, 4)
    C, ok, _ = psd_factor(st.gram)
    c = jr.normal(kc, (B, P), dtype=jnp.float64)
    xi = jr.normal(kn, (B,), dtype=jnp.float64)
    lam = c @ C.T                                                      # (B, P)
    G, gp = batch_gradients(model, st.params, lam, xi)
    T = bartlett(chi_square(kw, D - P - jnp.arange(B)),
                 jr.normal(kb, (B * (B - 1) // 2,), dtype=jnp.float64))
    tokens = c @ c.T + T @ T.T                                         # x_b·x_b'
    decay = 1.0 - hp.lr * hp.weight_decay / D
    GL = G.T @ lam                                                     # Σ_b G_b λ_bᵀ (S, P)
    om = st.gram
    rows = decay * om[:S] - (hp.lr / (B * D)) * GL
    ss = (decay**2 * om[:S, :S] - decay * (hp.lr / (B * D)) * (GL[:, :S] + GL[:, :S].T)
          + (hp.lr**2 / (B**2 * D)) * (G.T @ (tokens / D) @ G))
    gram = om.at[:S, :S].set(ss).at[:S, S:].set(rows[:, S:]).at[S:, :S].set(rows[:, S:].T)
    if model.spherical:                 # w_i ← √D w_i/|w_i|: exact on the Gram matrix
        scale = jnp.ones(P, gram.dtype).at[:S].set(1.0 / jnp.sqrt(jnp.diagonal(ss)))
        gram = (gram * scale[:, None] * scale[None, :]).at[jnp.arange(S), jnp.arange(S)].set(1.0)
    params = _param_step(model, hp, st.params, gp, D)
    first = (cs.fail_step < 0) & ~ok
    return ChainState(state=GramState(gram=gram, params=params),
                      fail_step=jnp.where(first, step, cs.fail_step))


# -- the maps over seeds -----------------------------------------------------------------------

def _weights_segment(model, hp, w, keys, starts, counts):
    def one_seed(w, key):
        def body(w, sc):
            def step(k, w):
                return weight_step(model, hp.at(k / w.D), w, jr.fold_in(key, k))

            w = jax.lax.fori_loop(sc[0], sc[0] + sc[1], step, w)
            return w, w.state()

        return jax.lax.scan(body, w, (starts, counts))

    return jax.vmap(one_seed)(w, keys)


def _chain_segment(model, hp, dim, cs, keys, starts, counts):
    def one_seed(cs, key):
        def body(cs, sc):
            def step(k, cs):
                return chain_step(model, hp.at(k / dim), dim, cs, jr.fold_in(key, k), k)

            cs = jax.lax.fori_loop(sc[0], sc[0] + sc[1], step, cs)
            return cs, cs.state

        return jax.lax.scan(body, cs, (starts, counts))

    return jax.vmap(one_seed)(cs, keys)


_weights_jit = eqx.filter_jit(_weights_segment)
_chain_jit = eqx.filter_jit(_chain_segment)


def _weak(tree: Any) -> Any:
    """`tree` with its Python float leaves (step sizes, label noise, the model's values) as
    weakly typed JAX scalars: traced by `eqx.filter_jit`, so runs that differ only in these
    values share one compiled segment, and weak, so they take the dtype of the arrays they
    meet (float32 weights stay float32, as with the floats compiled in)."""
    return jax.tree.map(lambda x: jnp.asarray(float(x)) if isinstance(x, float) else x, tree)


class _FamilySGD(AbstractSGD):
    """What both spaces share: the model, its step sizes, D, and the start of every seed
    (`init`: one state for all of them, or None for the model's random initialization)."""

    model: ModelBase
    hp: StepSizes
    dim: int = eqx.field(static=True)
    init: GramState | None = None

    def _weights(self, keys: Key[Array, "S 3"], dtype: Any) -> ModelWeights:
        model, dim, init = self.model, self.dim, self.init
        if init is None:
            return jax.vmap(lambda k: model.init_weights(k, dim, dtype))(keys[:, 1])
        init = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), init)
        model.check_state(init)
        n = keys.shape[0]
        W = jax.vmap(lambda k: _rows_with_gram(k, init.gram, dim))(keys[:, 0])
        S = model.n_students
        return ModelWeights(students=W[:, :S].astype(dtype), teachers=W[:, S:].astype(dtype),
                            params=jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *x.shape)),
                                                init.params))

    def _check_bounded(self, states: GramState, t_end: float, seeds: list[int]) -> None:
        bad = np.asarray(gather(~bounded(states.gram, axis=(1, 2, 3)), len(seeds)))
        if bool(np.any(bad)):
            j = int(np.argmax(bad))
            raise DivergenceError(f"SGD diverged (seed {seeds[j]}, D={self.dim}): the order "
                                  f"parameters became NaN/inf or exceeded {BLOWUP:.0e} before "
                                  f"t = {t_end:.4g}; try a smaller training.lr")

    def states(self, recorded: GramState) -> GramState:
        return recorded


class WeightSGD(_FamilySGD):
    """The family's online SGD of the D-dimensional weights (in `dtype`), recording their
    order parameters (float64)."""

    dtype: Any = eqx.field(static=True, default=jnp.float32)

    def start(self, keys: Key[Array, "S 3"], seeds: list[int]) -> tuple[ModelWeights, Array]:
        del seeds
        return self._weights(keys, self.dtype), keys[:, 2]

    def segment(self, carry, data, starts, counts):
        return _weights_jit(_weak(self.model), _weak(self.hp), carry, data, starts, counts)

    def check(self, carry: ModelWeights, recorded: GramState, t_end: float,
              seeds: list[int]) -> None:
        self._check_bounded(recorded, t_end, seeds)


class ChainSGD(_FamilySGD):
    """The family's online SGD of `(Ω, params)`, exactly in law (float64; D at least
    `P + B + 1`); every seed starts from the Gram matrix of its initial weights."""

    desc: ClassVar[str] = "SGD (overlaps)"

    def __check_init__(self):
        need = self.model.n_rows + self.hp.batch + 1
        if self.dim < need:
            raise HeadflowError(f"overlap-space SGD needs D >= P + B + 1 = {need} "
                                f"(got D = {self.dim})")

    def start(self, keys: Key[Array, "S 3"], seeds: list[int]) -> tuple[ChainState, Array]:
        del seeds
        w = self._weights(keys, jnp.float64)
        carry = jax.vmap(lambda ww: ChainState(state=ww.state(),
                                               fail_step=jnp.array(-1, jnp.int64)))(w)
        return carry, keys[:, 2]

    def segment(self, carry, data, starts, counts):
        return _chain_jit(_weak(self.model), as_float64(self.hp),
                          jnp.asarray(self.dim, jnp.float64), carry, data, starts, counts)

    def check(self, carry: ChainState, recorded: GramState, t_end: float,
              seeds: list[int]) -> None:
        fail = np.asarray(gather(carry.fail_step, len(seeds)))
        if np.any(fail >= 0):
            j = int(np.argmin(np.where(fail >= 0, fail, np.iinfo(np.int64).max)))
            raise DivergenceError(f"SGD in overlap space (seed {seeds[j]}, D={self.dim}): "
                                  "the Gram matrix stopped being positive semi-definite at "
                                  f"t = {fail[j] / self.dim:.6g}; try a smaller training.lr")
        self._check_bounded(recorded, t_end, seeds)


def family_sgd(model: ModelBase, hp: StepSizes, *, dim: int, space: str = "weights",
               init: GramState | None = None, dtype: Any = jnp.float32) -> AbstractSGD:
    """The family's online SGD in `space` (`"weights"`, in `dtype`, or `"overlaps"`, the exact
    chain in float64), every seed from `init` when given."""
    require_x64("the SGD simulators (their overlaps)")
    if space == "overlaps":
        return ChainSGD(model=model, hp=hp, dim=int(dim), init=init)
    return WeightSGD(model=model, hp=hp, dim=int(dim), init=init, dtype=dtype)


def _rows_with_gram(key: PRNGKeyArray, gram: Float[Array, "P P"], dim: int
                    ) -> Float[Array, "P D"]:
    """Rows of dimension `dim` whose Gram matrix over D is exactly `gram`: `C E` with
    `gram = C Cᵀ` and `E` random orthogonal rows of norm `√D`."""
    P = gram.shape[-1]
    frame, _ = jnp.linalg.qr(jr.normal(key, (dim, P), dtype=jnp.float64))
    C, _, _ = psd_factor(gram)
    return (C @ frame.T) * jnp.sqrt(jnp.asarray(dim, jnp.float64))

