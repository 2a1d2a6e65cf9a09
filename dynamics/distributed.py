"""Runs across processes and hosts with `jax.distributed`.

After [`initialize`][], `jax.devices()` lists the devices of every process, and the batched work
of headflow (the points of a sweep, the SGD seeds) is sharded over all of them
([`headflow.dynamics.sharding`][]); every process computes its shard and holds the whole result at
the end. On CPUs the processes exchange data with gloo collectives.

The settings come from the command line (`headflow --distributed`, `--coordinator HOST:PORT`,
`--num-processes N`, `--process-id I`) or from the environment:

| variable | meaning |
|---|---|
| `HEADFLOW_DISTRIBUTED` | `1` (or `true`, `yes`, `on`): start `jax.distributed` |
| `HEADFLOW_COORDINATOR` | `HOST:PORT` of process 0's coordinator service |
| `HEADFLOW_NUM_PROCESSES` | number of processes |
| `HEADFLOW_PROCESS_ID` | this process's id, `0 … N − 1` |

A flag wins over its variable, and giving any of the three values turns the distributed mode
on. Values left unset are filled in by JAX's own cluster detection (SLURM, Open MPI, …; JAX also
reads `JAX_COORDINATOR_ADDRESS`), exactly as `jax.distributed.initialize()` does with no
arguments.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping

import jax
import numpy as np

from ._errors import HeadflowError

ENV_ENABLE = "HEADFLOW_DISTRIBUTED"
ENV_COORDINATOR = "HEADFLOW_COORDINATOR"
ENV_NUM_PROCESSES = "HEADFLOW_NUM_PROCESSES"
ENV_PROCESS_ID = "HEADFLOW_PROCESS_ID"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")
_ADDRESS = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})")

INIT_TIMEOUT_S = 300
"""How long a process waits for the others to join (JAX's default)."""


class DistributedError(HeadflowError):
    """Bad or unusable distributed settings (one line)."""


@dataclasses.dataclass(frozen=True)
class DistributedSettings:
    """What [`initialize`][] passes to `jax.distributed.initialize`; `None` values are detected
    by JAX (SLURM, Open MPI, …)."""

    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None

    @classmethod
    def resolve(cls, *, enabled: bool = False, coordinator: str | None = None,
                num_processes: str | int | None = None, process_id: str | int | None = None,
                environ: Mapping[str, str] | None = None) -> DistributedSettings | None:
        """The settings from the command-line values (`None`: not given) and the environment
        (`environ`, default `os.environ`), checked; `None` when the distributed mode is not
        asked for.

        **Raises:** [`DistributedError`][] naming the flag or variable at fault: an address
        that is not `HOST:PORT`, a count below 1, an id that is negative or not below the
        count, or an `HEADFLOW_DISTRIBUTED` that is neither on nor off."""
        env = os.environ if environ is None else environ

        def pick(value, flag: str, var: str) -> tuple[str | None, str]:
            if value is not None:
                return str(value), flag
            text = env.get(var, "").strip()
            return (text or None), var

        switch = env.get(ENV_ENABLE, "").strip().lower()
        if switch not in _TRUE + _FALSE:
            raise DistributedError(f"{_show(ENV_ENABLE, env[ENV_ENABLE])}: expected 1 or 0")
        addr, addr_src = pick(coordinator, "--coordinator", ENV_COORDINATOR)
        count, count_src = pick(num_processes, "--num-processes", ENV_NUM_PROCESSES)
        pid, pid_src = pick(process_id, "--process-id", ENV_PROCESS_ID)
        if not (enabled or switch in _TRUE or any(v is not None for v in (addr, count, pid))):
            return None
        if addr is not None:
            m = _ADDRESS.fullmatch(addr)
            if m is None or not 1 <= int(m.group(1)) <= 65535:
                raise DistributedError(f"{_show(addr_src, addr)}: expected HOST:PORT with a "
                                       "port in 1..65535 (e.g. node01:12345)")
        n = _integer(count, count_src, minimum=1)
        i = _integer(pid, pid_src, minimum=0)
        if n is not None and i is not None and i >= n:
            raise DistributedError(f"{_show(pid_src, pid)}: must be below the number of "
                                   f"processes ({_show(count_src, count)})")
        return cls(coordinator=addr, num_processes=n, process_id=i)


def _integer(text: str | None, source: str, *, minimum: int) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise DistributedError(f"{_show(source, text)}: expected an integer >= {minimum}")
    return value


def _show(source: str, text: str | None) -> str:
    """`--flag 'value'` or `VARIABLE='value'`, as the user wrote it."""
    return f"{source} {text!r}" if source.startswith("--") else f"{source}={text!r}"


def initialize(settings: DistributedSettings, *, timeout_s: int = INIT_TIMEOUT_S) -> None:
    """Start `jax.distributed` with `settings` (values left `None` are detected by JAX on SLURM,
    Open MPI and the other clusters it knows), with gloo collectives between CPU processes. Call
    it once, before any JAX computation; it returns once every process has joined.

    **Raises:** [`DistributedError`][] (one line) when the settings are incomplete outside a
    cluster JAX recognizes, when JAX has already started computing, or when the processes do
    not meet within `timeout_s` seconds."""
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(coordinator_address=settings.coordinator,
                                   num_processes=settings.num_processes,
                                   process_id=settings.process_id,
                                   initialization_timeout=timeout_s)
    except (ValueError, TypeError, RuntimeError) as err:
        text = " ".join(str(err).split())
        missing = [f"{flag} (or {var})" for value, flag, var in (
            (settings.coordinator, "--coordinator HOST:PORT", ENV_COORDINATOR),
            (settings.num_processes, "--num-processes N", ENV_NUM_PROCESSES),
            (settings.process_id, "--process-id I", ENV_PROCESS_ID)) if value is None]
        if "defined" in text and missing:
            text = (f"no cluster detected (SLURM, Open MPI, …) to supply the settings; give "
                    f"{', '.join(missing)}")
        raise DistributedError(f"--distributed: {text}") from None


def process_zero_says(flag: bool) -> bool:
    """Process 0's `flag`, on every process (`flag` itself outside the distributed mode): for
    decisions only process 0 can make, such as whether the output folder it will write is
    usable. Every process must call it at the same point; none returns before all have
    arrived."""
    if not jax.distributed.is_initialized():
        return flag
    from jax.experimental import multihost_utils

    return bool(multihost_utils.broadcast_one_to_all(np.asarray(flag, dtype=np.int32)))


def is_main_process() -> bool:
    """Whether this is process 0, the one that writes results (always true outside the
    distributed mode)."""
    return not jax.distributed.is_initialized() or jax.process_index() == 0
