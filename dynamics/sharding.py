"""Placing batched work (seeds, sweep points) across the available devices.

On one device this does nothing. With several (GPUs, or CPU devices forced with
`XLA_FLAGS=--xla_force_host_platform_device_count=N`), the leading axis of every array is sharded
over a one-dimensional mesh, and jitted code that maps over that axis runs in parallel, with no
change to the numbers."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def shard_leading(tree, devices=None):
    """Shard the leading axis of every array leaf of `tree` over `devices` (default: all),
    when there are several devices and the axis length divides evenly; otherwise return `tree`
    unchanged."""
    devices = jax.devices() if devices is None else devices
    if len(devices) <= 1:
        return tree
    mesh = Mesh(np.asarray(devices), ("batch",))
    sharding = NamedSharding(mesh, PartitionSpec("batch"))

    def place(x):
        if isinstance(x, jax.Array) and x.ndim >= 1 and x.shape[0] % len(devices) == 0:
            return jax.device_put(x, sharding)
        return x

    return jax.tree.map(place, tree)
