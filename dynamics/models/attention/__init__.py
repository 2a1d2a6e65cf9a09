"""The attention model (`[model] kind = "attention"`, `docs/model.md`): the multi-head
single-location model, [`Model`][] (also `headflow.dynamics.Model`), a member of the family
([`headflow.dynamics.models.AbstractModel`][]) whose state is [`headflow.dynamics.Overlaps`][],
and the structure its theory exploits beyond the generic engine. Here:

- the vector fields: the reduced form on the invariant manifold ([`ManifoldField`][]), the
  full local-field form ([`FullField`][]), the sampled form of the SDE
  ([`SampledFullField`][]), on nodes closed under head permutations ([`key_nodes`][],
  [`full_nodes`][]); the generated right-hand side is
  [`headflow.dynamics.symbolic.SymbolicField`][];
- its starts ([`symmetric_start`][], [`random_start`][]) and its risk along a trajectory;
- the diffusion of its overlaps ([`Diffusion`][]) and the SDE's coordinates ([`flatten`][]);
- its parameters, as fields ([`Model`][]: the `[model]` and `[training]` tables derive from them);
- what its differentiable learning curves read: its hyperparameters ([`PARAMS`][],
  [`hyperparameters`][]), the start they set ([`AttentionStart`][]) and its risk
  ([`AttentionRisk`][]);
- its online SGD at finite D as exact maps: of the weights ([`AttentionWeightSGD`][],
  [`sgd_step`][]) and, exactly in law, of the overlaps ([`AttentionChainSGD`][],
  `docs/overlap-sgd.md`).

[`Model`][]'s methods hand these to the generic runs (`headflow.dynamics.ode.run_ode`,
`headflow.dynamics.sde.run_sde`, `headflow.sims.run_sgd`), which run it like any model
(its simulations over seeds: `headflow.sims.attention`).
"""

from ._nodes import full_dims as full_dims
from ._nodes import full_nodes as full_nodes
from ._nodes import g_perp_block as g_perp_block
from ._nodes import head_permutations as head_permutations
from ._nodes import key_nodes as key_nodes
from ._full import FullField as FullField
from ._manifold import ManifoldField as ManifoldField
from ._sampled import SampledFullField as SampledFullField
from ._sampled import sample_increment as sample_increment
from ._sampled import split_full_node as split_full_node
from ._start import initial_overlaps as initial_overlaps
from ._start import random_start as random_start
from ._start import symmetric_start as symmetric_start
from ._curve import PARAMS as PARAMS
from ._curve import AttentionRisk as AttentionRisk
from ._curve import AttentionStart as AttentionStart
from ._curve import PriorAmplitude as PriorAmplitude
from ._curve import hyperparameters as hyperparameters
from ._diffusion import Diffusion as Diffusion
from ._diffusion import entry_names as entry_names
from ._diffusion import flatten as flatten
from ._diffusion import increments as increments
from ._diffusion import n_entries as n_entries
from ._diffusion import unflatten as unflatten
from ._ode import field_class as field_class
from ._ode import resolved_rhs as resolved_rhs
from ._ode import trajectory_risk as trajectory_risk
from ._sgd import AttentionWeightSGD as AttentionWeightSGD
from ._sgd import field_gradients as field_gradients
from ._sgd import sgd_step as sgd_step
from ._chain import AttentionChainSGD as AttentionChainSGD
from ._model import Model as Model
