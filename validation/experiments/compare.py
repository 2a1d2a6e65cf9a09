"""Theory versus simulation: ODE and SGD from matched initial conditions
(`docs/ode.md#theory-versus-simulation`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dynamics import CROSS_OVERLAPS, ORDER_PARAMETERS, Config, Overlaps
from dynamics.measures import escape_time
from dynamics.ode import ODEResult, run_ode
from sims import SGDResult, run_sgd

_PER_HEAD = ("m", "n", "b", "kvs", "vks")
_HEAD_BY_HEAD = ("q", "s", "kv")


def canonical_permutation(m_final: np.ndarray) -> np.ndarray:
    """A head order that makes runs comparable despite the heads' permutation symmetry: heads
    sorted by their final alignment with feature 1 (descending), ties broken by the next
    features. `m_final (H, F)` → permutation (H)."""
    keys = tuple(-m_final[:, f] for f in reversed(range(m_final.shape[1])))
    return np.lexsort(keys)


def permute_heads(arrays: dict[str, np.ndarray], perm: np.ndarray) -> dict[str, np.ndarray]:
    """Apply a head permutation to one trajectory's order parameters (arrays `(T, ...)` named as
    in `sgd.npz`/`ode.npz`); other entries are returned unchanged."""
    out = dict(arrays)
    for name in _PER_HEAD:
        if name in out:
            out[name] = out[name][:, perm]
    for name in _HEAD_BY_HEAD:
        if name in out:
            out[name] = out[name][:, perm][:, :, perm]
    return out


def canonicalize_seeds(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Put every seed of an SGD record (arrays `(S, T, ...)`) in its canonical head order."""
    per_head = _PER_HEAD + _HEAD_BY_HEAD
    S = arrays["m"].shape[0]
    seeds = []
    for i in range(S):
        one = {k: arrays[k][i] for k in per_head if k in arrays}
        seeds.append(permute_heads(one, canonical_permutation(one["m"][-1])))
    out = dict(arrays)
    for k in per_head:
        if k in arrays:
            out[k] = np.stack([s[k] for s in seeds])
    return out


def canonicalize(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Canonical head order of one trajectory (arrays `(T, ...)`)."""
    return permute_heads(arrays, canonical_permutation(arrays["m"][-1]))



def seed_mean_initial(sgd: SGDResult) -> Overlaps:
    """The seed mean of the measured initial overlaps (all blocks, cross terms included)."""
    return jax.tree.map(lambda x: jnp.mean(x[:, 0], axis=0), sgd.overlaps)


def _sup(x: np.ndarray) -> float:
    return float(np.max(np.abs(x))) if x.size else 0.0


def agreement_report(sgd: dict[str, np.ndarray], ode: dict[str, np.ndarray], *, dim: int,
                     seeds: int) -> dict:
    """Quantitative agreement between the ODE and the seed mean of SGD on a common
    time grid: sup-norm deviations of the risk and of each order parameter over the whole run,
    over the pre-escape window (before any SGD seed or the ODE leaves the unspecialized plateau,
    where single runs track the ODE) and at the final time, with the seed spread.

    Heads are exchangeable, and which head takes which direction at the specialization escape
    is random: every run (each seed and the ODE) is first put in its canonical head order
    ([`canonical_permutation`][])."""
    sgd, ode = canonicalize_seeds(sgd), canonicalize(ode)
    t = sgd["t"]
    rs, ro = sgd["risk"].mean(axis=0), ode["risk"]
    esc_sgd = [escape_time(t, sgd["m"][i], sgd["q"][i]) for i in range(seeds)]
    esc_ode = escape_time(t, ode["m"], ode["q"])
    candidates = [e for e in esc_sgd + [esc_ode] if e is not None]
    t_pre = min(candidates) if candidates else float(t[-1])
    pre = t <= t_pre

    rep: dict = {"dim": int(dim), "seeds": int(seeds), "t_max": float(t[-1])}
    dev = np.abs(ro - rs)
    rep["risk_sup_abs"] = float(dev.max())
    rep["risk_sup_rel"] = float((dev / np.abs(rs)).max())
    rep["risk_spread"] = float(sgd["risk"].std(axis=0, ddof=1).max()) if seeds > 1 else 0.0
    rep["risk_mc_err"] = float(max(sgd["risk_err"].max(), ode["risk_err"].max()))
    for name in ORDER_PARAMETERS:
        mean = sgd[name].mean(axis=0)
        rep[f"{name}_sup_abs"] = _sup(ode[name] - mean)
        rep[f"{name}_spread"] = _sup(sgd[name].std(axis=0, ddof=1)) if seeds > 1 else 0.0
    rep["cross_sup_sgd"] = max(_sup(sgd[c].mean(axis=0)) for c in CROSS_OVERLAPS)
    rep["pre_escape"] = {
        "t_end": float(t_pre),
        "risk_sup_abs": float(dev[pre].max()),
        "risk_sup_rel": float((dev[pre] / np.abs(rs[pre])).max()),
        **{f"{n}_sup_abs": _sup(ode[n][pre] - sgd[n][:, pre].mean(axis=0))
           for n in ORDER_PARAMETERS},
    }
    rep["final"] = {"t": float(t[-1]), "risk_ode": float(ro[-1]), "risk_sgd": float(rs[-1]),
                    "risk_abs": float(dev[-1]), "risk_rel": float(dev[-1] / abs(rs[-1])),
                    "risk_sgd_sem": float(sgd["risk"][:, -1].std(ddof=1) / np.sqrt(seeds))
                    if seeds > 1 else 0.0}
    rep["escape"] = {"sgd": esc_sgd, "ode": esc_ode,
                     "sgd_escaped": int(sum(e is not None for e in esc_sgd))}
    return rep


def compare(cfg: Config, *, dim: int | None = None, seeds: int | None = None,
            progress: bool = False) -> tuple[SGDResult, ODEResult, dict]:
    """SGD at `dim` over `seeds`, then the ODE started from the seed mean of the measured
    initial overlaps on the same time grid; returns both and the agreement report."""
    sgd = run_sgd(cfg, dim=dim, seeds=seeds, progress=progress)
    ov0 = seed_mean_initial(sgd)
    ode = run_ode(cfg, ov0, np.asarray(sgd.t), progress=progress)
    report = agreement_report(sgd.arrays(), ode.arrays(), dim=sgd.dim, seeds=len(sgd.seeds))
    report["ode_form"] = cfg.ode.form
    return sgd, ode, report


def canonical_arrays(sgd: SGDResult, ode: ODEResult) -> tuple[dict, dict]:
    """Both runs' arrays in canonical head order (for figures)."""
    return canonicalize_seeds(sgd.arrays()), canonicalize(ode.arrays())
