"""Population risk (`docs/model.md#population-risk`), Bayes-optimal risk and the Bayes-softmax
construction (`docs/model.md#bayes-optimal-risk-and-the-bayes-softmax-construction`)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree, Scalar

from ._errors import ConfigError
from ._jit import jit_by_structure
from ._model import SIGNAL, AttentionBase
from ._overlaps import FieldLaw, Overlaps
from .expectations import AbstractExpectation, AbstractNodes
from .priors import AbstractDiscretePrior


def as_nodes(rule: AbstractExpectation | AbstractNodes, dim: int) -> AbstractNodes:
    """`rule` itself if it is a node set (of dimension `dim`), else its nodes in `dim`
    dimensions."""
    if isinstance(rule, AbstractNodes):
        if rule.dim != dim:
            raise ValueError(f"nodes of dimension {rule.dim} where {dim} are needed")
        return rule
    return rule.nodes(dim)


def key_dims(model: AttentionBase) -> int:
    """Gaussian dimensions of one draw of the key fields: θ's node coordinates
    (`prior.n_node_dims`: none for a discrete prior, summed exactly, nor for a Gaussian one,
    which joins the signal token's law), `g*` (F per token) and `g⊥` (H per token)."""
    return model.prior.n_node_dims + model.L * (model.F + model.H)


def split_key_normals(model: AttentionBase, x: Float[Array, " d"]):
    """Split one node of dimension `key_dims(model)` into `(θ-normals, g* (F, L), g⊥ (H, L))`."""
    dt, L, F, H = model.prior.n_node_dims, model.L, model.F, model.H
    g_star = x[dt:dt + L * F].reshape(F, L)
    g_perp = x[dt + L * F:dt + L * (F + H)].reshape(H, L)
    return x[:dt], g_star, g_perp


def over_theta(model: AttentionBase, theta_normals: Float[Array, " dt"],
               g_star: Float[Array, "F L"], fn):
    """`E_θ fn(θ)` at one node whose teacher key normals are `g_star`: an exact sum over a
    discrete support, or θ from the node ([`headflow.dynamics.priors.AbstractPrior.signal_theta`][]:
    every integrand depends on θ only through `χ*_1 = θ + g*_1`)."""
    thetas, weights = model.prior.signal_theta(theta_normals, g_star[:, SIGNAL])
    values = jax.vmap(fn)(thetas)
    return jax.tree.map(lambda v: jnp.tensordot(weights, v, axes=1), values)


def risk_integrand(model: AttentionBase, law: FieldLaw, b: Float[Array, " H"],
                   x: Float[Array, " d"]) -> Scalar:
    """`E_θ E[(ŷ − y)² | key fields]` at one node (value fields integrated out exactly)."""
    tn, g_star, g_perp = split_key_normals(model, x)

    def at(theta):
        chi_star, chi = law.key_fields(theta, g_star, g_perp)
        return model.conditional_error(chi, b, law.value_moments(chi_star, g_perp))

    return over_theta(model, tn, g_star, at)


def risk_nodes(model: AttentionBase, backend: AbstractExpectation) -> AbstractNodes:
    """The nodes [`population_risk`][] integrates over (the key fields of `model`): build them
    once to evaluate many states on common random numbers."""
    return backend.nodes(key_dims(model))


def key_expectation(model: AttentionBase, ov: Overlaps, rule: AbstractExpectation | AbstractNodes,
                    fn: Callable[[Float[Array, "F L"], Float[Array, "H L"]], PyTree], *,
                    manifold: bool = False) -> tuple[PyTree, PyTree]:
    """`E fn(χ*, χ)` over θ and the key fields of a student with overlaps `ov` (teacher key
    fields `χ* (F, L)`, student key fields `χ (H, L)`, the signal on the first token), and its
    error estimate."""
    nodes = as_nodes(rule, key_dims(model))
    law = FieldLaw.from_overlaps(ov, model.rho, manifold=manifold)

    def at_node(x):
        tn, g_star, g_perp = split_key_normals(model, x)
        return over_theta(model, tn, g_star, lambda th: fn(*law.key_fields(th, g_star, g_perp)))

    return nodes.estimate(jax.vmap(at_node))


def population_risk(model: AttentionBase, ov: Overlaps,
                    rule: AbstractExpectation | AbstractNodes, *,
                    manifold: bool = False) -> tuple[Scalar, Scalar]:
    """The test risk `R = E(ŷ − y)²` of a student with overlaps `ov`, and its error estimate.

    Exact at any D for given weights (their fields are exactly Gaussian), so the simulator's
    recorded risk and the ODE's risk are this same function.

    **Arguments:** `rule`: an expectation backend, or nodes of dimension `key_dims(model)` (pass
    the same nodes to compare risks with common random numbers); `manifold=True` ignores the
    cross overlaps (the ODE's fast path).
    """
    return _estimate_risk(model, ov, as_nodes(rule, key_dims(model)), manifold)


# The node sums of the risks, compiled once per structure (`jit_by_structure`), with the nodes
# as arguments, not constants of the program.

@jit_by_structure
def _estimate_risk(model: AttentionBase, ov: Overlaps, nodes: AbstractNodes,
                   manifold: bool) -> tuple[Scalar, Scalar]:
    law = FieldLaw.from_overlaps(ov, model.rho, manifold=manifold)
    return nodes.estimate(jax.vmap(lambda x: risk_integrand(model, law, ov.b, x)))


def bayes_integrand(model: AttentionBase, x: Float[Array, " d"]) -> Scalar:
    """`ρ*(1 − Σ_ℓ p_ℓ²) + Δ²` at one node, `p` the posterior over the location."""
    dt, L, F = model.prior.n_node_dims, model.L, model.F
    tn, g_star = x[:dt], x[dt:dt + L * F].reshape(F, L)

    def at(theta):
        chi_star = g_star + theta[:, None] * (jnp.arange(L) == SIGNAL)[None, :]
        p = jax.nn.softmax(model.prior.log_pi(chi_star.T))
        return model.rho * (1.0 - jnp.sum(p**2)) + model.noise**2

    return over_theta(model, tn, g_star, at)


def bayes_risk(model: AttentionBase, backend: AbstractExpectation) -> tuple[Scalar, Scalar]:
    """`R_Bayes = Δ² + ρ*(1 − E Σ_ℓ p_ℓ²)` and its error estimate. Independent of the
    student (only the prior, L, Δ and ρ* matter)."""
    return _estimate_bayes(model, backend.nodes(model.prior.n_node_dims + model.L * model.F))


@jit_by_structure
def _estimate_bayes(model: AttentionBase, nodes: AbstractNodes) -> tuple[Scalar, Scalar]:
    return nodes.estimate(jax.vmap(lambda x: bayes_integrand(model, x)))


def bayes_construction(model: AttentionBase) -> tuple[Overlaps, Float[Array, "S F"]]:
    """The Bayes-softmax construction for a discrete prior: one head per support point
    (points of zero weight dropped), `k_s = Σ_f θ^s_f k*_f`, `v_s = v*`,
    `b_s = log p_s − |θ^s|²/2`. With Bayes-softmax its risk is `R_Bayes`.

    **Returns:** the overlaps (`m = Θ`, `q = ΘΘᵀ`, `n = ρ*`, `s = ρ* 11ᵀ`) and the support
    points used (their number is the construction's head count).
    """
    prior = model.prior
    if not isinstance(prior, AbstractDiscretePrior):
        raise ConfigError(f"the Bayes-softmax construction needs a discrete prior "
                          f"(flipped_spike, one_hot, discrete), not {type(prior).__name__}")
    w = np.asarray(prior.weights)
    keep = w > 0
    theta = jnp.asarray(np.asarray(prior.points)[keep])
    S = theta.shape[0]
    b = jnp.log(jnp.asarray(w[keep])) - 0.5 * jnp.sum(theta**2, axis=-1)
    ov = Overlaps.manifold(m=theta, q=theta @ theta.T, n=jnp.full(S, model.rho),
                           s=jnp.full((S, S), model.rho), b=b)
    return ov, theta
