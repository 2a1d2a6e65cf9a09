"""Over-parameterization of the committee machine with output noise (Goldt et al. 2019,
docs/committee.md), at a small size: K = 2, 3 students on an M = 2 erf teacher, σ = 0.5,
η = 0.5, to t = 500 on the ODE (closed-form field)."""

from __future__ import annotations

import numpy as np
import pytest

from headflow.dynamics import load_config
from headflow.validation.experiments.overparam import k_trend

CONFIG = ["model.kind='committee'", "model.K=2", "model.M=2", "model.activation='erf'",
          "model.noise=0.5", "training.lr=0.5", "training.t_max=500.0", "output.n_save=51"]


@pytest.mark.slow
def test_k_trend_first_layer_grows_both_layers_do_not():
    """The final ε_g grows from K = M to M + 1 when only the first layer is trained and does not
    grow when both layers are; the slopes of `KTrend` are those of the numbers it holds."""
    kt = k_trend(load_config(None, CONFIG), 1)
    first, both = kt.ode["first"], kt.ode["both"]
    print(f"K = {kt.Ks}: first layer {first}, both layers {both}")
    assert kt.Ks == [2, 3]
    assert np.all(np.isfinite(first)) and np.all(np.isfinite(both))
    assert first[1] > first[0] * 1.05
    assert both[1] <= both[0]
    assert kt.slope("first") == pytest.approx(first[1] - first[0], rel=1e-10)
    assert kt.slope("both") == pytest.approx(both[1] - both[0], rel=1e-10)
