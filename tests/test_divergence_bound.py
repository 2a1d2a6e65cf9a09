"""One divergence rule for every integrator and simulator: an entry that is NaN, infinite or
above `headflow.dynamics.ode.BLOWUP` in absolute value (`headflow.dynamics.ode.bounded`). The ODE's
event, the SDE's domain and the SGD simulators (weight and overlap space, the attention model and
the committee) all apply it, so a run whose overlaps grow past the level while still finite is
stopped with a one-line `DivergenceError`, as the ODE of the same start would be."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from headflow import sims
from headflow.dynamics import DivergenceError, load_config
from headflow.dynamics.ode import BLOWUP, BlowUp, bounded


def test_bounded_is_the_blow_up_event():
    """Entrywise: finite and strictly below the level; NaN and ±inf are not bounded. The
    ODE's event is the negation over all leaves."""
    x = jnp.array([[0.0, -BLOWUP * (1 - 1e-12)], [BLOWUP, 1.0], [jnp.nan, 0.0],
                   [-jnp.inf, 0.0]])
    np.testing.assert_array_equal(np.asarray(bounded(x, axis=1)), [True, False, False, False])
    assert bool(bounded(x[:1])) and not bool(bounded(x))
    event = BlowUp()
    assert not bool(event(0.0, {"a": x[0], "b": x[0]}, None))
    for row in x[1:]:
        assert bool(event(0.0, {"a": x[0], "b": row}, None))


# A start far above the level, finite, with a step size too small to move it: only the bound
# can stop these runs (before, they ran to the end and returned the numbers).
HUGE = {"attention": ["training.init_key_std=2000.0", "training.lr=1e-9",
                      "training.lr_bias=1e-9"],
        "committee": ["model.kind='committee'", "model.K=2", "model.M=1",
                      "training.init_first_std=2000.0", "training.lr=1e-9"]}


@pytest.mark.parametrize("space", ["weights", "overlaps"])
@pytest.mark.parametrize("kind", ["attention", "committee"])
def test_sgd_stops_at_the_blow_up_level(kind, space):
    cfg = load_config(None, [*HUGE[kind], "sim.dim=60", "sim.seeds=2", "training.t_max=0.05",
                             "output.n_save=3", f"sim.space='{space}'", "sim.dtype='float64'"])
    with pytest.raises(DivergenceError, match=r"exceeded 1e\+06") as info:
        sims.run_sgd(cfg)
    assert "\n" not in str(info.value) and "seed 0" in str(info.value)
