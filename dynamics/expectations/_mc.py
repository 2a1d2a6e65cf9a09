import jax.numpy as jnp
import jax.random as jr

from ._base import AbstractExpectation, MonteCarloNodes


class MonteCarlo(AbstractExpectation):
    """Plain Monte Carlo with a fixed key (common random numbers). Error `∝ n^{-1/2}`."""

    samples: int
    seed: int = 0

    def nodes(self, dim: int) -> MonteCarloNodes:
        x = jr.normal(jr.key(self.seed), (self.samples, dim), dtype=jnp.float64)
        return MonteCarloNodes(x=x, w=jnp.full(self.samples, 1.0 / self.samples))
