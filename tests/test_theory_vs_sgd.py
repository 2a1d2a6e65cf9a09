"""The quick tier's theory-against-simulation checks, one per model: the attention model, the
committee machine, the tutorial's user model (phase retrieval, loaded from its file) and a
spherical single-index model.

For each, exact overlap-space SGD (`sim.space = "overlaps"`, whose cost per step does not depend
on D) at D = 4000 from random starts, 24 seeds, is compared with the ODE from the D → ∞ start
(`ode.init = "symmetric"`) at every save time t > 0: the seed mean of every order parameter that
moves, and of the risk, within `Z` standard errors of the ODE (the risk's own Monte Carlo error
included where it has one). The finite-D bias of the mean is O(1/D), far below the standard
error O(1/√(D·seeds)), so a miss beyond `Z` means the drift or the SGD step is wrong. The same
runs reject the ODE at a learning rate 1.3 times too large: the comparison resolves what it
checks. Every seed is fixed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headflow import sims
from headflow.dynamics import load_config
from headflow.dynamics.ode import run_ode

Z = 5.0

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "phase_retrieval"

COMMON = ["sim.space=overlaps", "sim.dim=4000", "sim.seeds=24", "ode.init=symmetric",
          "output.n_save=5", "sim.risk_samples=1024"]

CASES = {
    # the defaults (Bayes-softmax heads, flipped-spike prior), before the heads specialize; the
    # field by autodiff of the predictor, the engine's own (the derived one equals it:
    # tests/test_symbolic.py), so the check does not rest on the symbolic derivation
    "attention": ["training.t_max=2", "model.L=2", "ode.samples=1024", 'ode.rhs="autodiff"'],
    "committee": ['model.kind="committee"', "model.K=2", "model.M=2", 'model.activation="erf"',
                  "model.noise=0.2", "training.lr=0.8", "training.t_max=4"],
    "phase_retrieval": [f'model.kind="{EXAMPLE / "phase_retrieval.py"}:PhaseRetrieval"',
                        "training.lr=0.1", "training.t_max=3"],
    # a spherical He_1 student under the correlation loss (the projection's drift and step)
    "spherical_single_index": ['model.kind="single_index"', 'model.activation="he1"',
                               'model.loss="correlation"', "model.spherical=true",
                               "model.noise=0.5", "training.lr=1.0", "training.t_max=1.5"],
}


def _moving(arrays: dict[str, np.ndarray], seeds: int) -> dict[str, np.ndarray]:
    """Every entry of the named order parameters and the risk, flattened to `(S, T, n)`, with
    the time axis second; entries that no seed moves (a fixed teacher) are left out."""
    out = {}
    for name, v in arrays.items():
        if name in ("t", "steps", "seeds", "risk_err") or v.ndim < 2 or v.shape[0] != seeds:
            continue
        flat = v.reshape(v.shape[0], v.shape[1], -1)
        spread = flat[:, 1:].std(axis=0, ddof=1)
        if np.all(spread > 0):
            out[name] = flat
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_sgd_seed_means_follow_the_ode(name):
    cfg = load_config(None, [*CASES[name], *COMMON])
    sgd = sims.run_sgd(cfg)
    seeds = len(sgd.seeds)
    moving = _moving(sgd.arrays(), seeds)
    assert "risk" in moving and len(moving) >= 2, sorted(moving)

    # the risk of the SGD states is a Monte Carlo estimate on nodes common to every seed (a
    # closed form for the committee and the polynomial model: zero error), so its error does
    # not average out over the seeds and enters the comparison beside theirs
    risk_err = np.asarray(sgd.risk_err)[:, 1:].mean(axis=0)

    def worst_z(c) -> float:
        ode = run_ode(c).arrays()
        worst = 0.0
        for key, v in moving.items():
            ref = ode[key].reshape(ode[key].shape[0], -1)[1:]
            mean = v[:, 1:].mean(axis=0)
            var = v[:, 1:].var(axis=0, ddof=1) / seeds
            if key == "risk":
                var = var + (risk_err**2 + ode["risk_err"][1:] ** 2)[:, None]
            worst = max(worst, float(np.max(np.abs(mean - ref) / np.sqrt(var))))
        return worst

    right = worst_z(cfg)
    wrong = worst_z(cfg.replace(**{"training.lr": 1.3 * cfg.training.lr}))
    print(f"{name}: largest |z| {right:.2f} at the configured η, {wrong:.1f} at 1.3 η")
    assert right < Z
    assert wrong > Z
