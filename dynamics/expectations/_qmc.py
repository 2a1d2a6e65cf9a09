import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import ndtri
from scipy.stats import qmc

from ._base import AbstractExpectation, Nodes


class QuasiMonteCarlo(AbstractExpectation):
    """Randomized quasi-Monte Carlo: `replicates` independently scrambled Sobol sequences mapped
    to normals by the inverse CDF. The error estimate is the spread of the replicate means."""

    samples: int
    seed: int = 0
    replicates: int = eqx.field(static=True, default=8)

    def nodes(self, dim: int) -> Nodes:
        per = max(self.samples // self.replicates, 2)
        m = int(np.ceil(np.log2(per)))
        rng = np.random.default_rng(self.seed)
        blocks = []
        for _ in range(self.replicates):
            u = qmc.Sobol(dim, scramble=True, seed=rng).random_base2(m)
            blocks.append(ndtri(np.clip(u, 2.0**-60, 1.0 - 2.0**-53)))
        x = np.concatenate(blocks)
        return Nodes(x=jnp.asarray(x), w=jnp.full(x.shape[0], 1.0 / x.shape[0]),
                     groups=self.replicates)

    def error(self, values, mean, nodes, f):
        R = nodes.groups

        def se(v, mu):
            g = v.reshape(R, -1, *v.shape[1:]).mean(axis=1)
            return jnp.sqrt(jnp.sum((g - mu) ** 2, axis=0) / (R * (R - 1)))

        return jax.tree.map(se, values, mean)
