"""Linear stability of the unspecialized phase (spec §8 items 1 and 3).

From a small random start all heads first move together, on the *symmetric subspace* where
every head has the same order parameters; they specialize when the head-to-head differences,
`O(1/√D)` at the start, have grown to `O(1)`. This module provides

- the symmetric subspace and its projector ([`head_average`][]), and the reduced ODE on it
  ([`SymmetricField`][]);
- an exactly head-permutation-equivariant vector field ([`equivariant_field`][]): the Gaussian
  nodes are closed under all permutations of the heads' noise (the engine does this for H ≤ 4;
  here up to H = 6), so the symmetric subspace is exactly invariant and the Jacobian exactly
  commutes with head permutations (with independent nodes the `O(N^{-1/2})` asymmetry of the
  estimate would itself seed specialization);
- the head-difference perturbations ([`HeadModes`][]): by Schur's lemma the Jacobian restricted
  to the *standard* representation of the permutation group (perturbations where the heads
  differ, weighted by a vector `w ⊥ 1`) is `I_{H−1} ⊗ B(t)` with one small matrix `B(t)`
  acting on the multiplicity space (`δm_{·f}`, `δq_diag`, `δq_off`, `δn`, `δs_diag`, `δs_off`,
  `δb`, each `∝ w`);
- the tangent-linear equation `dΦ/dt = B(t) Φ` integrated *along* the symmetric trajectory
  (the plateau need not be a fixed point), with the instantaneous growth rate
  `λ(t) = max Re eig B(t)` and its eigenvector ([`linear_stability`][]);
- the escape time it predicts for dimension D from the random-initialization law of the head
  differences ([`predicted_escape_times`][]): the linearized head spread grows like
  `e^{∫λ}/√D`, so `∫_0^{t_esc} λ(τ) dτ = ½ ln D + c`.

Jacobians are forward-mode autodiff of the ODE right-hand side ([`ManifoldField`][]); the square
root `q^{1/2}` has a JVP that stays valid at the repeated eigenvalues of the symmetric point.
Definitions and decisions: `docs/phases.md`.
"""

from __future__ import annotations

import itertools
import math

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float

from ._errors import HeadflowError
from ._model import Model
from ._overlaps import Overlaps
from ._risk import key_dims
from .expectations import Nodes, get_expectation
from .ode._fields import AbstractField, Hyper, ManifoldField
from .ode._integrate import get_solver
from .ode._symmetry import head_permutations
from .ode._state import random_start

MAX_GROUP = 720
"""Largest permutation group (`H!`, so H ≤ 6) over which the nodes are closed."""


# -- the symmetric subspace ----------------------------------------------------------------------


def _sym_matrix(a: Float[Array, "H H"]) -> Float[Array, "H H"]:
    H = a.shape[-1]
    a = 0.5 * (a + a.T)
    diag = jnp.mean(jnp.diagonal(a))
    eye = jnp.eye(H, dtype=a.dtype)
    off = (jnp.sum(a) - jnp.trace(a)) / (H * (H - 1)) if H > 1 else jnp.zeros((), a.dtype)
    return diag * eye + off * (1.0 - eye)


def head_average(ov: Overlaps) -> Overlaps:
    """The orthogonal projection onto the symmetric subspace (every head alike): per-head
    quantities replaced by their head mean, the diagonal and off-diagonal entries of `q` and `s`
    by their means; cross overlaps dropped (the invariant manifold)."""
    H = ov.H
    m = jnp.broadcast_to(jnp.mean(ov.m, axis=0), ov.m.shape)
    n = jnp.full((H,), jnp.mean(ov.n), ov.n.dtype)
    b = jnp.full((H,), jnp.mean(ov.b), ov.b.dtype)
    return Overlaps.manifold(m, _sym_matrix(ov.q), n, _sym_matrix(ov.s), b)


def head_differences(ov: Overlaps) -> Overlaps:
    """`ov − head_average(ov)` on the manifold: the part of the state where heads differ."""
    avg = head_average(ov)
    return jax.tree.map(lambda a, b: a - b, ov.on_manifold(), avg)


def flatten(ov: Overlaps) -> Float[Array, " N"]:
    """Manifold coordinates `(m, q, n, s, b)` as one vector (q and s as full matrices)."""
    return jnp.concatenate([ov.m.ravel(), ov.q.ravel(), ov.n, ov.s.ravel(), ov.b])


def unflatten(vec: Float[Array, " N"], H: int, F: int) -> Overlaps:
    """Inverse of [`flatten`][] (cross overlaps zero)."""
    i = 0
    out = []
    for shape in ((H, F), (H, H), (H,), (H, H), (H,)):
        size = math.prod(shape)
        out.append(vec[i:i + size].reshape(shape))
        i += size
    return Overlaps.manifold(*out)


# -- an exactly equivariant vector field ---------------------------------------------------------


def permutation_closed(nodes: Nodes, model: Model) -> Nodes:
    """Close a node set under all `H!` permutations of the heads' noise `g⊥` (rows of the
    `H×L` block of each node): each node followed by its images, weights divided by `H!`,
    `orbit = H!` (so error estimates average each orbit first), QMC replicate blocks kept
    contiguous. The estimate of a head-symmetric expectation is unchanged in law while the
    vector field becomes exactly equivariant: `f(P·ov) = P·f(ov)` for every permutation `P`."""
    H, L, F = model.H, model.L, model.F
    if nodes.x_low is not None:  # tensor-product quadrature: already closed
        return nodes
    perms = np.array(list(itertools.permutations(range(H))))
    start = model.prior.n_normal_dims + L * F

    def close(x, w):
        g = x[:, start:start + H * L].reshape(-1, H, L)
        blocks = [jnp.concatenate([x[:, :start], g[:, p].reshape(-1, H * L),
                                   x[:, start + H * L:]], axis=1) for p in perms]
        xs = jnp.stack(blocks, axis=1).reshape(-1, x.shape[1])     # node-major, perm-minor
        ws = jnp.repeat(w / len(perms), len(perms))
        return xs, ws

    x, w = close(nodes.x, nodes.w)
    return Nodes(x=x, w=w, groups=nodes.groups, orbit=len(perms))


def equivariant_field(model: Model, hyper: Hyper, *, expectation: str = "qmc",
                      samples: int = 4096, seed: int = 0) -> ManifoldField:
    """The manifold vector field with nodes closed under *all* head permutations, `samples`
    nodes in all. For H ≤ 4 this is the engine's field ([`ManifoldField.build`][] closes the
    nodes under the full group); for H = 5, 6 the engine closes them under cyclic shifts only,
    and this closes them under all `H!` permutations ([`permutation_closed`][]).

    **Raises:** [`HeadflowError`][] when `H! > 720` or `samples < 16·H!` (H = 5, 6).
    """
    backend = get_expectation(expectation, samples, seed=seed)
    G = math.factorial(model.H)
    if expectation == "quadrature" or len(head_permutations(model.H)) == G:
        return ManifoldField.build(model, hyper, backend)
    if G > MAX_GROUP:
        raise HeadflowError(f"the equivariant vector field closes the nodes under all H! head "
                            f"permutations; H = {model.H} gives {G} > {MAX_GROUP}: use H ≤ 6")
    if samples < 16 * G:
        raise HeadflowError(f"ode.samples = {samples} is too small to close the nodes under all "
                            f"{G} permutations of H = {model.H} heads: need at least 16·H! = "
                            f"{16 * G} (or use the engine's cyclic closure, --engine-field)")
    base = get_expectation(expectation, math.ceil(samples / G), seed=seed)
    nodes = permutation_closed(base.nodes(key_dims(model)), model)
    return ManifoldField(model=model, hyper=hyper, nodes=nodes)


def field_for(cfg, model: Model | None = None, *, equivariant: bool = True) -> ManifoldField:
    """The manifold vector field of a configuration, equivariant by default (same node budget
    `[ode] samples`); `equivariant=False` gives the engine's field."""
    model = cfg.build_model() if model is None else model
    hyper = Hyper.from_config(cfg)
    o = cfg.ode
    if equivariant:
        return equivariant_field(model, hyper, expectation=o.expectation, samples=o.samples,
                                 seed=o.seed)
    backend = get_expectation(o.expectation, o.samples, seed=o.seed)
    return ManifoldField.build(model, hyper, backend)


class SymmetricField(eqx.Module):
    """The reduced ODE on the symmetric subspace: `P f(P ov)` with `P` = [`head_average`][].
    Exactly invariant (round-off cannot seed specialization)."""

    field: AbstractField

    def __call__(self, t, ov: Overlaps, args=None) -> Overlaps:
        return head_average(self.field(t, head_average(ov)))


# -- head-difference perturbations ---------------------------------------------------------------


def helmert(H: int) -> np.ndarray:
    """An orthonormal basis `(H−1, H)` of the vectors orthogonal to `1` (head contrasts)."""
    rows = []
    for i in range(1, H):
        w = np.zeros(H)
        w[:i] = 1.0
        w[i] = -float(i)
        rows.append(w / np.sqrt(i * (i + 1)))
    return np.asarray(rows).reshape(H - 1, H)


def bias_is_inert(model: Model) -> bool:
    """True when the activation ignores the bias (softmax): then `b` never moves and is left
    out of the perturbations."""
    chi = jr.normal(jr.key(0), (model.H, model.L), dtype=jnp.float64)
    b = jnp.linspace(-1.0, 1.0, model.H)
    return bool(jnp.allclose(model.attention(chi, b), model.attention(chi, 0.0 * b),
                             rtol=0, atol=1e-14))


class HeadModes(eqx.Module):
    """Bases of the perturbations of the manifold coordinates ([`flatten`][]).

    - `standard (H−1, N, μ)`: for each Helmert contrast `w` ([`helmert`][]), the orthonormal
      columns `δm_{·f} = w` (f = 1..F), `δq = diag w`, `δq_{hh'} = w_h + w_{h'}` (h ≠ h', H ≥ 3),
      `δn = w`, `δs` (same two patterns), `δb = w`; frozen values (`train_values = false`) and an
      inert bias (softmax) are left out. The Jacobian maps each `w`-block to itself with the
      same matrix `B` (Schur's lemma for an equivariant field).
    - `differences (N, k)`: an orthonormal basis of all head-difference perturbations (the
      complement of the symmetric subspace among symmetric `q, s`), same exclusions.
    - `labels`: the names of the μ columns.
    """

    standard: Float[Array, "Hm1 N mu"]
    differences: Float[Array, "N k"]
    labels: tuple[str, ...] = eqx.field(static=True)
    H: int = eqx.field(static=True)
    F: int = eqx.field(static=True)

    @classmethod
    def build(cls, model: Model) -> HeadModes:
        H, F = model.H, model.F
        if H < 2:
            raise HeadflowError("head-difference perturbations need at least 2 heads "
                                f"(model.H = {H})")
        values = model.train_values
        bias = not bias_is_inert(model)
        N = H * F + 2 * H * H + 2 * H
        blocks = []
        labels: list[str] = []
        for k, w in enumerate(helmert(H)):
            cols = []
            off = np.add.outer(w, w) * (1.0 - np.eye(H))
            pats = [(f"m_{f + 1}", "m", np.outer(w, np.eye(F)[f])) for f in range(F)]
            pats += [("q_diag", "q", np.diag(w))]
            if H >= 3:
                pats += [("q_off", "q", off)]
            if values:
                pats += [("n", "n", w), ("s_diag", "s", np.diag(w))]
                if H >= 3:
                    pats += [("s_off", "s", off)]
            if bias:
                pats += [("b", "b", w)]
            for name, block, pat in pats:
                parts = {"m": np.zeros((H, F)), "q": np.zeros((H, H)), "n": np.zeros(H),
                         "s": np.zeros((H, H)), "b": np.zeros(H)}
                parts[block] = pat
                v = np.concatenate([parts[x].ravel() for x in "mqnsb"])
                cols.append(v / np.linalg.norm(v))
                if k == 0:
                    labels.append(name)
            blocks.append(np.stack(cols, axis=1))
        standard = np.stack(blocks)                                     # (H−1, N, μ)
        differences = _difference_basis(H, F, values=values, bias=bias)
        assert differences.shape[0] == N
        return cls(standard=jnp.asarray(standard), differences=jnp.asarray(differences),
                   labels=tuple(labels), H=H, F=F)

    @property
    def mu(self) -> int:
        return self.standard.shape[-1]

    def tangent(self, coef: Float[Array, "Hm1 mu"]) -> Overlaps:
        """The perturbation `Σ_k U_k coef_k` as overlaps."""
        return unflatten(jnp.einsum("knj,kj->n", self.standard, coef), self.H, self.F)


def _difference_basis(H: int, F: int, *, values: bool, bias: bool) -> np.ndarray:
    """Orthonormal basis of `range(P_T − P_sym P_T)` restricted to the active coordinates."""
    N = H * F + 2 * H * H + 2 * H

    def apply(fn):
        return np.stack([np.asarray(fn(np.eye(N)[i])) for i in range(N)], axis=1)

    def sym_qs(v):
        o = unflatten(jnp.asarray(v), H, F)
        return flatten(Overlaps.manifold(o.m, 0.5 * (o.q + o.q.T), o.n, 0.5 * (o.s + o.s.T),
                                         o.b))

    def active(v):
        o = unflatten(jnp.asarray(v), H, F)
        z = jnp.zeros_like
        return flatten(Overlaps.manifold(o.m, o.q, o.n if values else z(o.n),
                                         o.s if values else z(o.s), o.b if bias else z(o.b)))

    PT = apply(sym_qs) @ apply(active)
    PS = apply(lambda v: flatten(head_average(unflatten(jnp.asarray(v), H, F)))) @ PT
    P = PT - PS
    lam, U = np.linalg.eigh(0.5 * (P + P.T))
    return U[:, lam > 0.5]


# -- Jacobians -----------------------------------------------------------------------------------


def restricted_jacobian(field: AbstractField, ov: Overlaps, basis: Float[Array, "N k"]
                        ) -> Float[Array, "k k"]:
    """`Uᵀ J U` with `J` the Jacobian of the right-hand side at `ov` (forward-mode autodiff,
    one JVP per column of `U`)."""
    H, F = ov.H, ov.F
    f = lambda o: flatten(field(0.0, o))                              # noqa: E731
    _, f_lin = jax.linearize(f, ov.on_manifold())
    cols = jax.vmap(lambda v: f_lin(unflatten(v, H, F)))(basis.T)     # (k, N)
    return basis.T @ cols.T


def growth_matrix(field: AbstractField, ov: Overlaps, modes: HeadModes) -> Float[Array, "mu mu"]:
    """`B`: the Jacobian on one standard-representation block (first Helmert contrast)."""
    return restricted_jacobian(field, ov, modes.standard[0])


def leading_mode(B: np.ndarray) -> tuple[float, np.ndarray, complex]:
    """`(max Re eig B, its eigenvector (real part, unit norm, largest entry positive), the
    eigenvalue)`."""
    lam, vec = np.linalg.eig(np.asarray(B))
    i = int(np.argmax(lam.real))
    v = vec[:, i].real
    if np.linalg.norm(v) == 0:
        v = vec[:, i].imag
    v = v / np.linalg.norm(v)
    v = v * np.sign(v[np.argmax(np.abs(v))])
    return float(lam[i].real), v, complex(lam[i])


# -- the tangent-linear equation along the symmetric trajectory ----------------------------------


class StabilityResult(eqx.Module):
    """The symmetric trajectory and the tangent-linear propagator of head differences on it.

    - `t (T)`; `symmetric`: the symmetric state (leaves `(T, ...)`);
    - `propagator (T, μ, μ)`: `Φ(t)` with `dΦ/dt = B(t) Φ`, `Φ(0) = I`;
    - `growth_rate (T)`: `λ(t) = max Re eig B(t)`; `eigenvalue (T)` (complex);
      `eigenvector (T, μ)` in the coordinates `labels`;
    - `log_growth (T)`: `∫_0^t λ` (trapezoid on the save grid);
    - `other_rate (T)`: the largest growth rate among the head-difference perturbations *outside*
      the standard representation (NaN where not computed; only exists for H ≥ 4).
    """

    t: Float[Array, " T"]
    symmetric: Overlaps
    propagator: Float[Array, "T mu mu"]
    growth_rate: Float[Array, " T"]
    eigenvalue: Array
    eigenvector: Float[Array, "T mu"]
    log_growth: Float[Array, " T"]
    other_rate: Float[Array, " T"]
    labels: tuple[str, ...] = eqx.field(static=True)

    def finite_time_rate(self) -> np.ndarray:
        """`d/dt ln σ_max(Φ(t))`: the growth rate of the most amplified perturbation
        (finite differences on the save grid; 0 at t = 0)."""
        smax = np.linalg.svd(np.asarray(self.propagator), compute_uv=False)[:, 0]
        return np.gradient(np.log(smax), np.asarray(self.t))


class _TLState(eqx.Module):
    ov: Overlaps
    phi: Float[Array, "mu mu"]


class _TangentLinear(eqx.Module):
    field: AbstractField
    basis: Float[Array, "N mu"]

    def __call__(self, t, y: _TLState, args=None) -> _TLState:
        ov = head_average(y.ov)
        H, F = ov.H, ov.F
        f = lambda o: self.field(t, o)                                 # noqa: E731
        d_ov, f_lin = jax.linearize(f, ov)
        cols = jax.vmap(lambda c: flatten(f_lin(unflatten(self.basis @ c, H, F))),
                        in_axes=1, out_axes=1)(y.phi)                  # (N, μ)
        return _TLState(ov=head_average(d_ov), phi=self.basis.T @ cols)


@eqx.filter_jit
def _solve_tl(term, y0, ts, solver, rtol, atol, max_steps):
    return dfx.diffeqsolve(dfx.ODETerm(term), solver, t0=ts[0], t1=ts[-1], dt0=None, y0=y0,
                           saveat=dfx.SaveAt(ts=ts),
                           stepsize_controller=dfx.PIDController(rtol=rtol, atol=atol),
                           max_steps=max_steps, throw=False)


def linear_stability(field: AbstractField, ov0: Overlaps, ts, *, modes: HeadModes | None = None,
                     solver: str = "tsit5", rtol: float = 1e-7, atol: float = 1e-9,
                     max_steps: int = 20000, other_every: int = 0) -> StabilityResult:
    """Integrate the symmetric trajectory from `head_average(ov0)` together with the
    tangent-linear propagator of the head differences, and the instantaneous growth rate along
    it.

    **Arguments:**

    - `field`: the manifold vector field (use [`equivariant_field`][] so that the symmetric
      subspace is exactly invariant and the Jacobian exactly block-diagonal).
    - `ov0`: the start (projected on the symmetric subspace); `ts` the save times.
    - `modes`: the perturbation bases (default: built for the field's model).
    - `solver`, `rtol`, `atol`, `max_steps`: diffrax settings.
    - `other_every`: compute the growth rate outside the standard representation at every
      `other_every`-th save time (0: never; only meaningful for H ≥ 4).

    **Returns:** a [`StabilityResult`][].

    **Raises:** [`HeadflowError`][] when the solver fails or the state becomes non-finite.
    """
    model = field.model
    modes = HeadModes.build(model) if modes is None else modes
    ts = jnp.asarray(np.asarray(ts, dtype=np.float64))
    ov0 = head_average(jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), ov0))
    basis = modes.standard[0]
    y0 = _TLState(ov=ov0, phi=jnp.eye(modes.mu))
    sol = _solve_tl(_TangentLinear(field, basis), y0, ts, get_solver(solver), rtol, atol,
                    max_steps)
    ys = sol.ys
    ok = bool(sol.result == dfx.RESULTS.successful)
    finite = bool(jnp.all(jnp.isfinite(ys.phi))) and all(
        bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(ys.ov))
    if not (ok and finite):
        raise HeadflowError(f"the symmetric trajectory or its tangent-linear equation could not "
                            f"be integrated to t = {float(ts[-1]):.4g} (solver: "
                            f"{sol.result}); try a smaller training.lr or a shorter t_max")
    Bs = np.asarray(_jacobians(field, basis, ys.ov))
    rates, vecs, eigs = zip(*(leading_mode(B) for B in Bs))
    rates = np.asarray(rates)
    t_np = np.asarray(ts)
    log_growth = np.concatenate([[0.0], np.cumsum(0.5 * (rates[1:] + rates[:-1])
                                                   * np.diff(t_np))])
    other = np.full(len(t_np), np.nan)
    if other_every and model.H >= 4:
        other_rate = _other_rate_fn(field, modes)
        for i in range(0, len(t_np), other_every):
            other[i] = other_rate(jax.tree.map(lambda x: x[i], ys.ov))
    return StabilityResult(t=ts, symmetric=ys.ov, propagator=ys.phi,
                           growth_rate=jnp.asarray(rates), eigenvalue=jnp.asarray(eigs),
                           eigenvector=jnp.asarray(np.stack(vecs)),
                           log_growth=jnp.asarray(log_growth), other_rate=jnp.asarray(other),
                           labels=modes.labels)


@eqx.filter_jit
def _jacobians(field, basis, ovs):
    return jax.lax.map(lambda o: restricted_jacobian(field, o, basis), ovs, batch_size=4)


def _other_rate_fn(field: AbstractField, modes: HeadModes):
    """Largest growth rate on the head differences orthogonal to the standard representation."""
    U = np.asarray(modes.differences)
    S = np.concatenate(list(np.asarray(modes.standard)), axis=1)
    rest = U - S @ (S.T @ U)
    u, sv, _ = np.linalg.svd(rest, full_matrices=False)
    Q = jnp.asarray(u[:, sv > 1e-8])
    if Q.shape[1] == 0:
        return lambda ov: np.nan
    jac = eqx.filter_jit(restricted_jacobian)
    return lambda ov: float(np.max(np.linalg.eigvals(np.asarray(jac(field, ov, Q))).real))


# -- the escape time it predicts -----------------------------------------------------------------


def initial_contrasts(model: Model, key, modes: HeadModes, *, n: int, dim: int, key_std: float,
                      value_std: float, bias: float) -> Float[Array, "n Hm1 mu"]:
    """Samples of the head-difference coordinates of a random initialization at dimension
    `dim`, scaled by `√dim` (so they are `O(1)` and the perturbation at dimension D is
    `coef/√D`): `n` independent draws of [`dynamics.ode.random_start`][] projected on the
    standard blocks."""
    keys = jr.split(key, n)

    def one(k):
        ov = random_start(model, k, dim, key_std=key_std, value_std=value_std, bias=bias)
        d = flatten(head_differences(ov))
        return jnp.einsum("knj,n->kj", modes.standard, d) * jnp.sqrt(float(dim))

    return jax.jit(jax.vmap(one))(keys)


def alignment(ov: Overlaps) -> Float[Array, "H F"]:
    """`α_hf = m_hf / √q_hh`: cosine of head h with feature f (`|k*_f|²/D = 1`)."""
    return ov.m / jnp.sqrt(jnp.clip(jnp.diagonal(ov.q), 1e-300))[:, None]


def linear_spread(result: StabilityResult, modes: HeadModes,
                  coef: Float[Array, "n Hm1 mu"]) -> np.ndarray:
    """The head spread `max_f (max_h α_hf − min_h α_hf)` of the linearized perturbations
    `δ(t) = Σ_k U_k Φ(t) coef_k` around the symmetric trajectory, `(n, T)`. The spread is
    positively homogeneous of degree 1, so at dimension D it is this divided by `√D`."""
    H, F = modes.H, modes.F

    def at(ov, phi):
        c = jnp.einsum("ij,nkj->nki", phi, coef)                       # (n, H−1, μ)
        deltas = jnp.einsum("knj,mkj->mn", modes.standard, c)           # (n, N)

        def spread(d):
            _, da = jax.jvp(alignment, (ov,), (unflatten(d, H, F),))
            return jnp.max(jnp.max(da, axis=0) - jnp.min(da, axis=0))

        return jax.vmap(spread)(deltas)

    out = jax.jit(jax.vmap(at))(result.symmetric, result.propagator)   # (T, n)
    return np.asarray(out).T


def crossing_times(t: np.ndarray, log_values: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """First time each row of `log_values (n, T)` reaches each of `levels (k)` (linear
    interpolation of the log between save points); NaN where it never does. `(n, k)`."""
    t = np.asarray(t)
    out = np.full((log_values.shape[0], len(levels)), np.nan)
    for j, lev in enumerate(levels):
        above = log_values >= lev
        for i in range(log_values.shape[0]):
            idx = np.nonzero(above[i])[0]
            if idx.size == 0:
                continue
            k = int(idx[0])
            if k == 0:
                out[i, j] = t[0]
                continue
            a, b = log_values[i, k - 1], log_values[i, k]
            out[i, j] = t[k - 1] + (lev - a) / (b - a) * (t[k] - t[k - 1])
    return out


def predicted_escape_times(result: StabilityResult, modes: HeadModes,
                           coef: Float[Array, "n Hm1 mu"], dims, threshold: float
                           ) -> np.ndarray:
    """Linear-theory escape times `(n, len(dims))`: the first time the linearized head spread of
    each initial draw, divided by `√D`, reaches `threshold` (NaN if not before the end of
    `result.t`). Since the spread grows like `e^{∫λ}`, this is `∫_0^{t_esc} λ = ½ ln D + c`."""
    spread = linear_spread(result, modes, coef)
    with np.errstate(divide="ignore"):
        logs = np.log(np.maximum(spread, 1e-300))
    levels = np.log(threshold) + 0.5 * np.log(np.asarray(dims, dtype=np.float64))
    return crossing_times(np.asarray(result.t), logs, levels)
