"""The sparse-grid backend (`[ode] expectation = "sparse"`, `headflow.dynamics.expectations.
SparseGrid`): Smolyak's rule is exact to its total degree and not beyond, its nodes are closed
under every signed permutation of the coordinates to the last bit, its error estimate bounds
the error of a smooth integrand, and the ODE reads it like any backend."""

from __future__ import annotations

import itertools
import math

import jax
import numpy as np
import pytest

from headflow.dynamics import ConfigError, load_config
from headflow.dynamics.expectations import SparseGrid, get_expectation, smolyak_rule
from headflow.dynamics.expectations._sparse import rule_size


def _gaussian_moment(alpha) -> float:
    """`E Π_k g_k^{α_k}` for independent standard normals: `Π (α_k − 1)!!` (0 if one is odd)."""
    out = 1.0
    for a in alpha:
        if a % 2:
            return 0.0
        out *= math.prod(range(a - 1, 0, -2))
    return out


@pytest.mark.parametrize("level", [2, 3, 4])
def test_exact_to_total_degree_and_not_beyond(level):
    """Every monomial of total degree ≤ 2L − 1 in 3 dimensions is integrated exactly (to
    round-off); the degree-2L monomial `g_1^2 g_2^2 … ` spread over L coordinates is not (each
    coordinate needs one level above the first)."""
    dim = 3
    x, w = smolyak_rule(dim, level)
    assert rule_size(dim, level) >= x.shape[0] and rule_size(9, level) == smolyak_rule(9, level)[
        0].shape[0]                                 # counted without building the rule
    for alpha in itertools.product(range(2 * level), repeat=dim):
        if sum(alpha) > 2 * level - 1:
            continue
        got = math.fsum(w * np.prod(x ** np.asarray(alpha), axis=1))
        assert got == pytest.approx(_gaussian_moment(alpha), abs=1e-12), alpha
    spread = np.asarray([2] * min(level, dim) + [0] * (dim - min(level, dim)))
    if level <= dim:
        got = math.fsum(w * np.prod(x**spread, axis=1))
        assert abs(got - _gaussian_moment(spread)) > 0.1


def test_nodes_are_closed_under_signed_permutations():
    """For random signed permutations of 5 coordinates the rule maps onto itself, nodes and
    weights bit for bit (so every model's symmetry group leaves it invariant)."""
    x, w = smolyak_rule(5, 4)
    rows = np.concatenate([x, w[:, None]], axis=1)
    ref = rows[np.lexsort(rows.T[::-1])]
    rng = np.random.default_rng(0)
    for _ in range(5):
        perm, signs = rng.permutation(5), rng.choice([-1.0, 1.0], size=5)
        image = np.concatenate([x[:, perm] * signs, w[:, None]], axis=1)
        np.testing.assert_array_equal(image[np.lexsort(image.T[::-1])], ref)
    assert math.fsum(w) == pytest.approx(1.0, abs=1e-14)


def test_error_estimate_bounds_the_error_of_a_smooth_integrand():
    """`E exp(a·g) = exp(|a|²/2)` in 9 dimensions: the error falls by over 10× a level, and
    the estimate (the difference from the level below) is never below the actual error."""
    a = np.random.default_rng(1).normal(size=9) * 0.3
    exact = math.exp(a @ a / 2)
    errors = []
    for samples in (200, 1600, 10_000):
        nodes = SparseGrid(samples=samples).nodes(9)
        mean, err = nodes.estimate(lambda x: jax.numpy.exp(x @ a))
        actual = abs(float(mean) - exact)
        assert actual <= float(err), (samples, actual, float(err))
        errors.append(actual)
    assert errors[1] < 0.1 * errors[0] and errors[2] < 0.1 * errors[1]
    assert errors[2] / exact < 1e-6


@pytest.mark.fast_compile
def test_config_and_budget():
    """`ode.expectation = "sparse"` gives the rule of the highest level within `ode.samples`;
    a budget below the level-2 rule is a one-line error; the ODE of the demo config runs on
    it and agrees with the quasi-Monte Carlo risk within its error."""
    be = get_expectation("sparse", 1600)
    assert isinstance(be, SparseGrid) and be.level(9) == 4 and be.nodes(9).size == 1501
    with pytest.raises(ConfigError, match="level-2 rule in 9 dimensions has 19 nodes"):
        SparseGrid(samples=10).nodes(9)
    from headflow.dynamics.ode import run_ode

    sets = ["training.t_max=1", "output.n_save=3", "model.L=2", "model.H=1"]
    sparse = run_ode(load_config(None, [*sets, 'ode.expectation="sparse"', "ode.samples=4000"]))
    qmc = run_ode(load_config(None, [*sets, "ode.samples=16384"]))
    assert abs(float(sparse.risk[-1]) - float(qmc.risk[-1])) < 1e-3
