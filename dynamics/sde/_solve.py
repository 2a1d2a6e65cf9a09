"""Integrating the overlaps' SDE `dy = F(y) dt + D^{-1/2} B(y) dW` with diffrax, one Brownian
path per sample path (`docs/sde.md#integration`)."""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from typing import Any, ClassVar

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Key, PRNGKeyArray

from .._errors import ConfigError
from ..fields import AbstractField
from ..ode import bounded
from ..sharding import per_device
from ._diffusion import AbstractDiffusion

SOLVERS = ("euler", "drift_heun")
"""The stochastic solvers offered, both converging to the Itô solution: `"euler"`
(Euler–Maruyama) and `"drift_heun"` ([`DriftHeun`][]: the same noise, the drift by Heun's
trapezoidal rule). The overlap SDE is an Itô SDE with multiplicative, non-commutative noise:
diffrax's Heun, midpoint and SRK solvers converge to the Stratonovich solution of the same
equation (a different process), and its Itô Milstein solver needs commutative noise."""


class DriftHeun(dfx.AbstractItoSolver):
    """Euler–Maruyama with a predictor–corrector for the drift: for `dy = F dt + G dW`,

        ŷ  = y + F(y) h + G(y) ΔW
        y' = y + ½ (F(y) + F(ŷ)) h + G(y) ΔW

    The noise is taken at the left point, as in Euler–Maruyama, so the scheme converges to
    the Itô solution (strong order 1/2, weak order 1); without noise it is Heun's method
    (order 2), which removes Euler's first-order bias of the drift at twice the cost in drift
    evaluations. Terms: `MultiTerm(ODETerm(F), ControlTerm(G, brownian))`."""

    term_structure: ClassVar = dfx.MultiTerm[tuple[dfx.AbstractTerm, dfx.AbstractTerm]]
    interpolation_cls: ClassVar[Callable[..., dfx.LocalLinearInterpolation]] = (
        dfx.LocalLinearInterpolation)

    def order(self, terms):
        return 2

    def strong_order(self, terms):
        return 0.5

    def init(self, terms, t0, t1, y0, args):
        return None

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        del solver_state, made_jump
        drift, noise = terms.terms
        h, dw = drift.contr(t0, t1), noise.contr(t0, t1)
        f0 = drift.vf_prod(t0, y0, args, h)
        g0 = noise.vf_prod(t0, y0, args, dw)
        pred = jax.tree.map(lambda y, a, b: y + a + b, y0, f0, g0)
        f1 = drift.vf_prod(t1, pred, args, h)
        y1 = jax.tree.map(lambda y, a, b, c: y + 0.5 * (a + b) + c, y0, f0, f1, g0)
        return y1, None, dict(y0=y0, y1=y1), None, dfx.RESULTS.successful

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)


NOISE_FACTORS = ("nodes", "eigh")
"""How the diffusion is factored: `"nodes"`, the centred per-sample increments (no matrix
square root, one Brownian coordinate per sample); `"eigh"`, the symmetric square root of `Σ`
(one Brownian coordinate per entry of the state)."""


def get_sde_solver(name: str) -> dfx.AbstractSolver:
    """The diffrax solver of `[sde] solver` (see [`SOLVERS`][])."""
    if name not in SOLVERS:
        raise ConfigError(f"sde.solver = {name!r}: choose one of {', '.join(SOLVERS)}")
    return dfx.Euler() if name == "euler" else DriftHeun()


class OverlapSDE(eqx.Module):
    """The SDE of the independent entries `y` of the state (the diffusion's `flatten`):

        dy = F(y) dt + D^{-1/2} B(y) dW

    with `F` the drift of `drift` (the model's vector field with its `η²` terms) and `B` the
    factor of `diffusion` (see [`NOISE_FACTORS`][]). `inv_sqrt_dim` = `D^{-1/2}` is traced, so
    runs at several D share one compiled program."""

    drift: AbstractField
    diffusion: AbstractDiffusion
    inv_sqrt_dim: Float[Array, ""]
    noise: str = eqx.field(static=True, default="nodes")

    @property
    def control_size(self) -> int:
        """Dimension of the Brownian motion: the diffusion's `control_size` (`"nodes"`), or
        `p`."""
        if self.noise == "eigh":
            return self.diffusion.size
        return self.diffusion.control_size

    def drift_vf(self, t, y: Float[Array, " p"], args=None) -> Float[Array, " p"]:
        return self.diffusion.flatten(self.drift(t, self.diffusion.unflatten(y)))

    def diffusion_vf(self, t, y: Float[Array, " p"], args=None) -> Float[Array, "p k"]:
        del args
        diffusion = self.diffusion.at(t)
        ov = diffusion.unflatten(y)
        B = diffusion.sqrt_factor(ov) if self.noise == "eigh" else diffusion.factor(ov)
        return self.inv_sqrt_dim * B


def step_grid(times: np.ndarray, dt: float) -> np.ndarray:
    """The steps of a run: each save interval cut into equal steps no longer than `dt`, so that
    every save time is a step (no interpolation) and the steps do not depend on how the run is
    cut into calls."""
    times = np.asarray(times, dtype=np.float64)
    parts = [np.linspace(a, b, max(1, math.ceil((b - a) / dt - 1e-9)) + 1)[:-1]
             for a, b in zip(times[:-1], times[1:]) if b > a]
    return np.concatenate(parts + [times[-1:]])


class GridIncrements(dfx.AbstractBrownianPath):
    """A Brownian motion drawn as one independent Gaussian increment per step of a fixed grid:
    the increment over the step `[grid[i], grid[i+1]]` is `√(grid[i+1] − grid[i]) · N(0, I)`
    from the key `fold_in(key, i)`. Exact in law for a solver that asks for the increments of
    the grid's steps (a fixed-step solve on `dfx.StepTo(ts=grid)`, forwards or backwards); an
    interval that is not a step of the grid gets the increment of the step its left end lies
    in, which is not a Brownian increment. The same key and grid give the same path."""

    grid: Float[Array, " K"]
    key: PRNGKeyArray
    size: int = eqx.field(static=True)
    levy_area: type[dfx.BrownianIncrement] = eqx.field(static=True)

    def __init__(self, grid: Float[Array, " K"], key: PRNGKeyArray, size: int):
        self.grid, self.key, self.size = grid, key, size
        self.levy_area = dfx.BrownianIncrement

    @property
    def t0(self):
        return self.grid[0]

    @property
    def t1(self):
        return self.grid[-1]

    def evaluate(self, t0, t1=None, left: bool = True, use_levy: bool = False):
        del left
        if t1 is None or use_levy:
            raise NotImplementedError("GridIncrements gives the increments of its grid's steps "
                                      "only (no point values, no Lévy area)")
        t0, t1 = jax.lax.stop_gradient(t0), jax.lax.stop_gradient(t1)
        step = jnp.clip(jnp.searchsorted(self.grid, jnp.minimum(t0, t1), side="right") - 1,
                        0, self.grid.shape[0] - 2)
        h = t1 - t0
        z = jax.random.normal(jax.random.fold_in(self.key, step), (self.size,),
                              self.grid.dtype)
        return jnp.sign(h) * jnp.sqrt(jnp.abs(h)) * z


class AbstractBrownian(eqx.Module):
    """How the Brownian motion of a path is drawn (`[sde] brownian`, [`get_brownian`][]):
    `path(key, grid, size)` is the `size`-dimensional Brownian path of the key `key` for a solve
    on the step grid `grid`."""

    @abc.abstractmethod
    def path(self, key: PRNGKeyArray, grid: Float[Array, " K"], size: int
             ) -> dfx.AbstractBrownianPath:
        raise NotImplementedError


class StepIncrements(AbstractBrownian):
    """One Gaussian increment per step ([`GridIncrements`][]): one normal draw of the
    Brownian dimension per step. Another step size gives another path, equally exact in law."""

    def path(self, key, grid, size):
        return GridIncrements(grid=grid, key=key, size=size)


class BrownianTree(AbstractBrownian):
    """diffrax's virtual Brownian tree on `[grid[0], grid[-1]]`, resolved to `tol`: the same
    key gives the same Brownian path whatever the steps (for path-wise comparisons across step
    sizes), at the cost of a descent of the tree, `log2((t1 − t0)/tol)` levels of normal draws
    of the Brownian dimension, at both ends of every step."""

    tol: float = eqx.field(static=True)

    @classmethod
    def for_grid(cls, grid: np.ndarray) -> BrownianTree:
        """Resolved to an eighth of the grid's smallest step."""
        return cls(tol=float(np.min(np.diff(np.asarray(grid, np.float64)))) / 8.0)

    def path(self, key, grid, size):
        return dfx.VirtualBrownianTree(grid[0], grid[-1], tol=self.tol, shape=(size,), key=key)


BROWNIAN = ("increments", "tree")
"""How the Brownian paths are drawn (`[sde] brownian`): `"increments"` ([`StepIncrements`][],
one draw per step) or `"tree"` ([`BrownianTree`][], the same path whatever the steps)."""


def get_brownian(name: str, grid: np.ndarray) -> AbstractBrownian:
    """The Brownian motion of `[sde] brownian` (see [`BROWNIAN`][]) for the step grid `grid`."""
    if name == "increments":
        return StepIncrements()
    if name == "tree":
        return BrownianTree.for_grid(grid)
    raise ConfigError(f"sde.brownian = {name!r}: choose one of {', '.join(BROWNIAN)}")


@eqx.filter_jit
def solve_paths(sde: OverlapSDE, solver: dfx.AbstractSolver, y0: Float[Array, "n p"],
                keys: Key[Array, " n"], ts: Float[Array, " T"], grid: Float[Array, " K"],
                brownian: AbstractBrownian,
                adjoint: dfx.AbstractAdjoint = dfx.RecursiveCheckpointAdjoint()
                ) -> Float[Array, "n T p"]:
    """Integrate the SDE with `solver` ([`get_sde_solver`][]) for each path (`y0`, `keys`: a
    leading path axis, vmapped) from `ts[0]` to `ts[-1]` on the step grid `grid` (a
    [`step_grid`][]), saving at `ts`. Each path's Brownian motion is `brownian.path` of its key
    ([`AbstractBrownian`][]). `adjoint`: how the solve is differentiated
    (diffrax's; `dfx.ForwardMode()` for forward-mode Jacobians, `headflow.dynamics.ode.adjoint_of`).
    The drift is evaluated for the paths of a device at once, in node chunks sized for that
    batch ([`headflow.dynamics.fields.AbstractField.batched`][])."""
    sde = eqx.tree_at(lambda s: s.drift, sde, sde.drift.batched(per_device(y0.shape[0])))

    def one(y, key):
        terms = dfx.MultiTerm(dfx.ODETerm(sde.drift_vf), dfx.ControlTerm(
            sde.diffusion_vf, brownian.path(key, grid, sde.control_size)))
        sol = dfx.diffeqsolve(terms, solver, t0=ts[0], t1=ts[-1], dt0=None, y0=y,
                              saveat=dfx.SaveAt(ts=ts), stepsize_controller=dfx.StepTo(ts=grid),
                              max_steps=int(grid.shape[0]) + 1, throw=False,
                              adjoint=adjoint)
        assert sol.ys is not None
        return sol.ys

    return jax.vmap(one)(y0, keys)


def domain(ys: Float[Array, "n T p"], diffusion: Any, *, tol: float = 1e-9
           ) -> Bool[Array, "n T"]:
    """Whether each state is in the domain of the SDE: finite, every entry below the blow-up
    level of the ODEs (`headflow.dynamics.ode.BLOWUP`), and a valid (PSD) Gram matrix
    (`diffusion.gram`, [`in_domain`][])."""
    return jax.vmap(jax.vmap(lambda y: in_domain(y, diffusion.gram(y), tol)))(ys)


def in_domain(y: Float[Array, " p"], gram: Float[Array, "P P"], tol: float = 1e-9
              ) -> Bool[Array, ""]:
    """Whether the SDE's coordinates `y` are finite and below the blow-up level, and their
    Gram matrix `gram` is PSD: smallest eigenvalue `≥ −tol·max(1, max|Ω|)`."""
    finite = bounded(y)
    safe = jnp.where(finite, gram, 0.0)
    lam = jnp.linalg.eigvalsh(0.5 * (safe + safe.T))[0]
    scale = jnp.maximum(1.0, jnp.max(jnp.abs(safe)))
    return finite & (lam >= -tol * scale)
