"""The attention model's finite-D online SGD (`docs/model.md#training-online-sgd`): in weight
space ([`simulate`][], [`sgd_step`][]) and exactly in law in overlap space
([`simulate_overlaps`][], `docs/overlap-sgd.md`). Registered with the generic
[`headflow.sims.run_sgd`][] (`headflow.sims.simulate_states`)."""

from ._sgd import field_gradients as field_gradients
from ._sgd import sgd_step as sgd_step
from ._simulate import Simulation as Simulation
from ._simulate import recorded_risk as recorded_risk
from ._simulate import sgd_overlaps as sgd_overlaps
from ._simulate import simulate as simulate
from ._chain import simulate_overlaps as simulate_overlaps
