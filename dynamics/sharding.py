"""Placing batched work (seeds, sweep points) across the available devices.

On one device this does nothing. With several (GPUs, CPU devices forced with
`XLA_FLAGS=--xla_force_host_platform_device_count=N`, or the devices of several processes joined
by [`headflow.dynamics.distributed.initialize`][]), the leading axis of every array is sharded over
a one-dimensional mesh of all of them (`jax.devices()`), and jitted code that maps over that axis
runs in parallel.

A batch of `n` items is padded to a multiple of the device count by repeating its last item
([`shard_batch`][]); [`gather`][] brings results back to every process, whole, and drops the
padding. Each item is computed independently of the others, so the numbers do not depend on the
number of devices or processes beyond floating-point round-off (XLA may vectorize a batch of
another size differently)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

Tree = TypeVar("Tree")


def map_batched(f: Callable[[Any], Any], xs: Any, batch_size: int) -> Any:
    """`jax.lax.map(f, xs, batch_size=batch_size)` with `f` traced once: the leading axis is
    padded to a multiple of `batch_size` by repeating its last item, and the padding's results
    dropped (`lax.map` traces and compiles `f` a second time, vmapped over the remainder, when
    the length is not a multiple). A batch of at most `batch_size` items is one `vmap`."""
    n = jax.tree.leaves(xs)[0].shape[0]
    if n <= batch_size:
        return jax.vmap(f)(xs)
    size = -(-n // batch_size) * batch_size
    ys = jax.lax.map(f, jax.tree.map(lambda x: _repeat_last(x, size), xs),
                     batch_size=batch_size)
    return jax.tree.map(lambda y: y[:n], ys) if size > n else ys


def _repeat_last(x: Any, size: int) -> jax.Array:
    """`x` with its leading axis padded to `size` by repeating its last item."""
    x = jnp.asarray(x)
    if x.shape[0] == size:
        return x
    return jnp.concatenate([x, jnp.repeat(x[-1:], size - x.shape[0], axis=0)])


def shard_leading(tree: Tree, devices: list | None = None) -> Tree:
    """Shard the leading axis of every array leaf of `tree` over `devices` (default: all),
    when there are several devices and the axis length divides evenly; otherwise return `tree`
    unchanged."""
    devices = jax.devices() if devices is None else devices
    if len(devices) <= 1:
        return tree
    mesh = Mesh(np.asarray(devices), ("batch",))
    sharding = NamedSharding(mesh, PartitionSpec("batch"))

    def place(x):
        if not (isinstance(x, jax.Array) and x.ndim >= 1 and x.shape[0] % len(devices) == 0):
            return x
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            # random keys travel as their raw data (device_put of a key array cannot reach
            # the devices of other processes)
            return jax.random.wrap_key_data(jax.device_put(jax.random.key_data(x), sharding),
                                            impl=jax.random.key_impl(x))
        return jax.device_put(x, sharding)

    return jax.tree.map(place, tree)


def padded_size(n: int, devices: int | None = None) -> int:
    """`n` rounded up to a multiple of the number of `devices` (default: all devices)."""
    d = jax.device_count() if devices is None else devices
    return -(-n // d) * d


def per_device(n: int, devices: int | None = None) -> int:
    """How many of `n` batched items each of `devices` (default: all devices) holds once they
    are placed by [`shard_batch`][] (at least 1): the batch size that vmapped code sees on one
    device."""
    d = jax.device_count() if devices is None else devices
    return max(1, padded_size(n, d) // d)


def shard_batch(tree: Tree, n: int) -> Tree:
    """Pad the leading axis (length `n`) of every array leaf of `tree` to a multiple of the
    device count by repeating the last item, and shard it over all devices
    ([`shard_leading`][]). Leaves that are not arrays with a leading axis (Python numbers shared
    by the batch) are left as they are. Undo the padding with [`gather`][]`(result, n)`.

    **Raises:** `ValueError` when an array leaf's leading axis is not `n`."""
    size = padded_size(n)

    def pad(x):
        if not isinstance(x, (jax.Array, np.ndarray)) or np.ndim(x) == 0:
            return x
        if x.shape[0] != n:
            raise ValueError(f"shard_batch: a leaf has leading axis {x.shape[0]}, expected {n}")
        return _repeat_last(x, size)

    return shard_leading(jax.tree.map(pad, tree))


def gather(tree: Tree, n: int | None = None) -> Tree:
    """Every array leaf of `tree` whole on this process (collected from all processes when it
    is sharded across them), with its leading axis cut to `n` (the padding of
    [`shard_batch`][] dropped; `None`: kept whole). Leaves of one process stay JAX arrays;
    gathered ones become JAX arrays of this process."""

    def one(x: Any):
        if not isinstance(x, jax.Array):
            return x
        if not x.is_fully_addressable:
            x = jnp.asarray(multihost_utils.process_allgather(x, tiled=True))
        return x if n is None or x.ndim == 0 or x.shape[0] == n else x[:n]

    return jax.tree.map(one, tree)
