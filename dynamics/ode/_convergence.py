"""Node convergence of what a run reports: the final segment of a run, from a state it saved at
an earlier time to its end, rerun on `NODE_FACTOR` times the nodes, and the change of the
reported quantity (`docs/ode.md#node-convergence-of-a-reported-quantity`).

The ODE's expectations are sums over a fixed set of Gaussian nodes, so a long run converges to
the fixed point, or follows the trajectory, of the *discretized* field. Its error on the
quantity a command reports (a final risk, a pruning curve, the times at which features are
told apart) is measured here the one way that sees every route of the node error into it: the
same segment, from the same saved state, on 4× the nodes. The rerun is the caller's own
segment runner (the same integration, fixed-point search and evaluation as the run itself),
given the refined config; this module supplies the refined config, the segment's start and the
record of the change. What a verdict does with the change is `validation`'s business.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from ..config import Config
from ..expectations import AUTO_MAX_SAMPLES
from ._backend import AUTO_FALLBACK

NODE_FACTOR = 4
"""The rerun of a final segment uses this many times the run's nodes."""

SEGMENT = 0.5
"""The final segment starts at the last saved state at or before `t_end − SEGMENT·(t_end −
t_0)`: the last half of the run (for the chunked fixed-point search, its last chunk)."""


def node_count(cfg: Config) -> int | None:
    """The nodes of `[ode]` (`"auto"` as [`headflow.dynamics.ode.backend_of`][] resolves it without
    a pilot); None where `expectation = "exact"` (closed forms: no nodes to refine)."""
    if cfg.ode.expectation == "exact":
        return None
    return AUTO_FALLBACK if cfg.ode.samples == "auto" else int(cfg.ode.samples)


def refined(cfg: Config, factor: int = NODE_FACTOR) -> Config:
    """`cfg` with `factor` times the nodes of `[ode]` (at most `AUTO_MAX_SAMPLES`, the largest
    count the engine sizes for; at that cap the factor is smaller and the record says so)."""
    n = node_count(cfg)
    if n is None:
        raise ValueError("[ode] expectation = 'exact' has no nodes to refine")
    if factor < 2:
        raise ValueError(f"factor {factor}: must be at least 2")
    return cfg.replace(**{"ode.samples": int(min(n * factor, max(AUTO_MAX_SAMPLES, n)))})


def segment_start(ts, trajectory: Any, fraction: float = SEGMENT) -> tuple[float, Any]:
    """The start of a run's final segment: the last saved time at or before
    `t_end − fraction·(t_end − t_0)` and the state saved there (`trajectory`: leaves `(T, ...)`
    on the save grid `ts`)."""
    t = np.asarray(ts, dtype=np.float64)
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction {fraction}: must be in (0, 1]")
    at = t[-1] - fraction * (t[-1] - t[0])
    k = int(np.searchsorted(t, at, side="right")) - 1
    k = int(np.clip(k, 0, len(t) - 1))
    return float(t[k]), jax.tree.map(lambda x: x[k], trajectory)


@dataclasses.dataclass(frozen=True)
class NodeChange:
    """The change of a reported quantity (a number or an array) when a run's final segment,
    from its saved state at `t_from` to `t_to`, runs on `samples_fine` nodes instead of the
    run's `samples`: `value` (the run's), `value_fine` (the rerun's), `change` the largest
    absolute difference (inf where one of them is missing or not finite, e.g. a feature told
    apart at one node count and not the other)."""

    quantity: str
    samples: int
    samples_fine: int
    t_from: float
    t_to: float
    value: Any
    value_fine: Any

    @property
    def change(self) -> float:
        a, b = _as_array(self.value), _as_array(self.value_fine)
        if a.shape != b.shape:
            return float("inf")
        if a.size == 0:
            return 0.0
        d = np.abs(a - b)
        return float(np.max(d)) if np.all(np.isfinite(d)) else float("inf")

    def summary(self) -> dict:
        """JSON-able: the node counts, the segment, both values and the change."""
        return {"quantity": self.quantity, "samples": self.samples,
                "samples_fine": self.samples_fine, "t_from": self.t_from, "t_to": self.t_to,
                "value": _jsonable(self.value), "value_fine": _jsonable(self.value_fine),
                "change": self.change}

    def line(self) -> str:
        """One line for a command's printout."""
        return (f"{self.quantity}: {self.samples} -> {self.samples_fine} nodes over "
                f"t = {self.t_from:g}..{self.t_to:g}, change {self.change:.2e}")


def node_change(rerun: Callable[[Config, Any, float, float], Any], cfg: Config, start: Any,
                t_from: float, t_to: float, value: Any, *, quantity: str,
                factor: int = NODE_FACTOR) -> NodeChange:
    """Rerun a run's final segment on `factor` times its nodes and record the change of what it
    reports.

    **Arguments:** `rerun(cfg, start, t_from, t_to)`: the caller's segment runner, returning the
    reported quantity of the segment run with `cfg` from the state `start` at `t_from` to
    `t_to` (the same integration and evaluation as the run itself); `cfg` the run's config,
    `start` its saved state at `t_from` ([`segment_start`][]), `value` the quantity the run
    reported, `quantity` its name.

    **Returns:** a [`NodeChange`][].
    """
    fine = refined(cfg, factor)
    value_fine = rerun(fine, start, float(t_from), float(t_to))
    return NodeChange(quantity=quantity, samples=int(node_count(cfg) or 0),
                      samples_fine=int(fine.ode.samples), t_from=float(t_from),
                      t_to=float(t_to), value=value, value_fine=value_fine)


def _as_array(x) -> np.ndarray:
    if x is None:
        return np.array([np.nan])
    arr = np.asarray(x, dtype=object)
    if arr.dtype == object:
        arr = np.array([np.nan if v is None else v for v in arr.ravel()],
                       dtype=np.float64).reshape(arr.shape)
    return arr.astype(np.float64)


def _jsonable(x):
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    arr = np.asarray(x)
    return arr.tolist() if arr.dtype != object else [_jsonable(v) for v in arr.ravel()]
