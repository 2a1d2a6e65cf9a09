"""The attention model's finite-D online SGD (`docs/model.md#training-online-sgd`): in weight
space ([`simulate`][]) and exactly in law in overlap space ([`simulate_overlaps`][],
`docs/overlap-sgd.md`), with the risk SGD records ([`recorded_risk`][]). One step,
[`sgd_step`][] and [`field_gradients`][], is the model's own map
(`headflow.dynamics.models.attention`), which [`headflow.sims.run_sgd`][] runs for a config."""

from headflow.dynamics.models.attention import field_gradients as field_gradients
from headflow.dynamics.models.attention import sgd_step as sgd_step
from ._simulate import Simulation as Simulation
from ._simulate import recorded_risk as recorded_risk
from ._simulate import simulate as simulate
from ._simulate import simulate_overlaps as simulate_overlaps
