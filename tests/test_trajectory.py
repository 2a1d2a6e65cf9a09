"""Trajectory agreement between the ODE and finite-D SGD (issue 3,
`docs/ode.md#theory-versus-simulation`).

For the default model (Bayes-softmax, flipped spike) and a per-head softmax model, the relative
deviation of the risk between the ODE and the SGD seed mean, over the pre-escape window and at
the final state, shrinks from D = 500 to D = 4000 and is within 5% at D = 4000. The window is the
pre-escape window of the smallest D (the plateau lasts longer at larger D), so the same times are
compared at every D; across the escape single runs scatter, so there only the final state is
compared. The final state is the risk averaged over the last fifth of the run (time and seeds for
SGD): at stationarity a single save point of the SGD risk fluctuates by O(1/√D) per seed (≈ 5% at
D = 500), which the time average removes without changing what is compared.

SGD runs as the exact overlap-space chain (`sim.space = "overlaps"`, `docs/overlap-sgd.md`) at
both D: its one-step map equals the weight-space step to round-off and its law equals the
weight-space simulator's (`tests/test_overlap_sgd.py`), at a cost per step independent of D, and
since D is traced the two dimensions share one compiled program.
"""

import numpy as np
import pytest

import headflow.dynamics as d
from headflow.validation.experiments.compare import canonicalize, canonicalize_seeds, compare

CONFIGS = {
    # the interface defaults; t_max long enough for every seed to specialize and settle
    "default": ["training.t_max=100", "output.n_save=101"],
    # per-head softmax at a learning rate where it learns without specializing
    "softmax": ["model.activation=softmax", "training.lr=0.3", "training.t_max=20",
                "output.n_save=41"],
}


def _deviation(sgd, ode, t_window):
    s, o = canonicalize_seeds(sgd.arrays()), canonicalize(ode.arrays())
    rs, ro = s["risk"].mean(axis=0), o["risk"]
    rel = np.abs(ro - rs) / rs
    window = s["t"] <= t_window
    final = s["t"] >= 0.8 * s["t"][-1]
    rel_final = abs(ro[final].mean() - rs[final].mean()) / rs[final].mean()
    return max(rel[window].max(), rel_final)


@pytest.mark.slow
@pytest.mark.parametrize("name", CONFIGS)
def test_deviation_shrinks_with_dimension(name):
    base = d.load_config(None, CONFIGS[name] + ["sim.seeds=4", "ode.samples=8192"])
    runs = {}
    for dim in (500, 4000):
        runs[dim] = compare(base.replace(**{"sim.dim": dim, "sim.space": "overlaps"}))
    t_window = runs[500][2]["pre_escape"]["t_end"]
    dev = {dim: _deviation(sgd, ode, t_window) for dim, (sgd, ode, _) in runs.items()}
    print(f"{name}: window t <= {t_window:.2f}; relative risk deviation "
          f"D=500: {dev[500]:.4f}, D=4000: {dev[4000]:.4f}")
    assert dev[4000] < dev[500]
    assert dev[4000] < 0.05
    # every seed has specialized by the end in the default config, none in the softmax one
    escaped = runs[4000][2]["escape"]["sgd_escaped"]
    assert escaped == (4 if name == "default" else 0)
