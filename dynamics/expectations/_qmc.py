import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ._base import AbstractExpectation, ReplicateNodes


class QuasiMonteCarlo(AbstractExpectation):
    """Randomized quasi-Monte Carlo: `replicates` independently scrambled Sobol sequences mapped
    to normals by the inverse CDF. The error estimate is the spread of the replicate means."""

    samples: int
    seed: int = 0
    replicates: int = eqx.field(static=True, default=8)

    def nodes(self, dim: int) -> ReplicateNodes:
        from scipy.special import ndtri      # imported here: scipy.stats is slow to import
        from scipy.stats import qmc

        per = max(self.samples // self.replicates, 2)
        m = int(np.ceil(np.log2(per)))
        rng = np.random.default_rng(self.seed)
        blocks = []
        for _ in range(self.replicates):
            u = qmc.Sobol(dim, scramble=True, seed=rng).random_base2(m)
            blocks.append(ndtri(np.clip(u, 2.0**-60, 1.0 - 2.0**-53)))
        x = np.concatenate(blocks)
        return ReplicateNodes(x=jnp.asarray(x), w=jnp.full(x.shape[0], 1.0 / x.shape[0]),
                              replicates=self.replicates)
