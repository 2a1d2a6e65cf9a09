import hashlib
import io
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .._exported import file_digest, package_versions, write_atomically
from .._node_cache import node_cache
from ._base import AbstractExpectation, ReplicateNodes


class QuasiMonteCarlo(AbstractExpectation):
    """Randomized quasi-Monte Carlo: `replicates` independently scrambled Sobol sequences mapped
    to normals by the inverse CDF. The error estimate is the spread of the replicate means."""

    samples: int
    seed: int = 0
    replicates: int = eqx.field(static=True, default=8)

    def nodes(self, dim: int) -> ReplicateNodes:
        shape = (self.replicates * 2 ** self._log2_per_replicate(), dim)
        path = _stored_path(int(self.samples), self.replicates, int(self.seed), dim)
        x = _load(path, shape)
        if x is None:
            x = self._draw(dim)
            _store(path, x)
        return ReplicateNodes(x=jnp.asarray(x), w=jnp.full(x.shape[0], 1.0 / x.shape[0]),
                              replicates=self.replicates)

    def _log2_per_replicate(self) -> int:
        return int(np.ceil(np.log2(max(self.samples // self.replicates, 2))))

    def _draw(self, dim: int) -> np.ndarray:
        from scipy.special import ndtri      # imported here: scipy.stats is slow to import
        from scipy.stats import qmc

        m = self._log2_per_replicate()
        rng = np.random.default_rng(self.seed)
        blocks = []
        for _ in range(self.replicates):
            u = qmc.Sobol(dim, scramble=True, seed=rng).random_base2(m)
            blocks.append(ndtri(np.clip(u, 2.0**-60, 1.0 - 2.0**-53)))
        return np.concatenate(blocks)


def _stored_path(samples: int, replicates: int, seed: int, dim: int) -> Path | None:
    """Where the node set of these arguments is kept ([`headflow.dynamics.set_node_cache`][];
    None: off), keyed by them, by this file (the drawing code) and by the versions of SciPy and
    NumPy that draw it."""
    folder = node_cache()
    if folder is None:
        return None
    digest = hashlib.sha256((file_digest(__file__)
                             + package_versions(("scipy", "numpy"))).encode()).hexdigest()[:16]
    return folder / f"qmc-n{samples}-r{replicates}-s{seed}-d{dim}-{digest}.npy"


def _load(path: Path | None, shape: tuple[int, int]) -> np.ndarray | None:
    """The stored node set at `path`, or None when there is none or it is not a finite float64
    array of `shape` (a damaged file is drawn and written again)."""
    if path is None or not path.is_file():
        return None
    try:
        x = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    if x.shape != shape or x.dtype != np.float64 or not np.all(np.isfinite(x)):
        return None
    return x


def _store(path: Path | None, x: np.ndarray) -> None:
    """Write `x` to `path` as `.npy` through a temporary file (`write_atomically`: a reader never
    sees half a file; a cache that cannot be written is only slower)."""
    if path is None:
        return
    buf = io.BytesIO()
    np.save(buf, x, allow_pickle=False)
    write_atomically(path, buf.getvalue())
