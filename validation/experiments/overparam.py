"""Over-parameterization of the committee machine (Goldt, Advani, Saxe, Krzakala & Zdeborová
2019; `docs/committee.md`): the final generalization error of a student with K = M … M + k
hidden units learning an M-unit teacher with output noise σ > 0, with only the first layer
trained or both layers trained, from the ODE and, optionally, from SGD at one D.

The claim: with the first layer alone the final ε_g grows with K (each extra unit adds noise
that cannot be switched off); with both layers trained it stays flat or falls (the extra units'
second-layer weights shrink)."""

from __future__ import annotations

import dataclasses

import numpy as np

from headflow.dynamics import Config
from headflow.dynamics.ode import run_ode
from headflow.sims import run_sgd

LAYERS = {"first": False, "both": True}
"""The two training modes: `model.train_second_layer` of each."""


@dataclasses.dataclass
class KTrend:
    """Final risks per training mode (`"first"`, `"both"`) and K: `ode[mode] (len(Ks),)` (the
    mean over `tail` of the save grid), `sgd[mode] (len(Ks), seeds)` (the same tail mean of
    each SGD run; empty without SGD), and the least-squares slope of each in K."""

    Ks: list[int]
    ode: dict[str, np.ndarray]
    sgd: dict[str, np.ndarray]

    def slope(self, mode: str, source: str = "ode") -> float:
        """The least-squares slope of the final ε_g in K (SGD: of the seed means)."""
        y = self.ode[mode] if source == "ode" else self.sgd[mode].mean(axis=1)
        return float(np.polyfit(np.asarray(self.Ks, dtype=float), y, 1)[0])

    def slope_sgd_stderr(self, mode: str) -> float:
        """Standard error of the SGD slope from the seed scatter of each K's mean."""
        x = np.asarray(self.Ks, dtype=float)
        sem = self.sgd[mode].std(axis=1, ddof=1) / np.sqrt(self.sgd[mode].shape[1])
        w = (x - x.mean()) / np.sum((x - x.mean()) ** 2)
        return float(np.sqrt(np.sum(w ** 2 * sem ** 2)))


def _tail_mean(risk: np.ndarray, tail: float) -> np.ndarray:
    k = max(1, int(round(tail * risk.shape[-1])))
    return np.asarray(risk)[..., -k:].mean(axis=-1)


def k_trend(cfg: Config, extra: int = 4, *, tail: float = 0.1, sgd_seeds: int = 0,
            sgd_dim: int | None = None) -> KTrend:
    """The final ε_g (mean over the last `tail` of the save grid) of students with
    K = M … M + `extra` units, first layer alone and both layers, by the ODE of `cfg` (its
    `[ode]`, from its `[ode] init`) and, with `sgd_seeds`, by SGD (`[sim]`, at `sgd_dim`,
    default `sim.dim`)."""
    M = cfg.model.M
    Ks = list(range(M, M + extra + 1))
    ode: dict[str, list] = {m: [] for m in LAYERS}
    sgd: dict[str, list] = {m: [] for m in LAYERS}
    for mode, both in LAYERS.items():
        for K in Ks:
            c = cfg.replace(**{"model.K": K, "model.train_second_layer": both})
            ode[mode].append(float(_tail_mean(np.asarray(run_ode(c).risk), tail)))
            if sgd_seeds:
                r = run_sgd(c, dim=sgd_dim, seeds=sgd_seeds)
                sgd[mode].append(_tail_mean(np.asarray(r.risk), tail))
    return KTrend(Ks=Ks, ode={m: np.asarray(v) for m, v in ode.items()},
                  sgd={m: np.asarray(v) for m, v in sgd.items()})
