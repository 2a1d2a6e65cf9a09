"""Analysis of the order-parameter ODEs (`docs/phases.md`, `docs/activations.md`).

- the symmetric subspace (every head alike), its projector and an exactly head-equivariant field:
  [`head_average`][], [`SymmetricField`][], [`equivariant_field`][];
- head-difference perturbations ([`HeadModes`][]): by Schur's lemma the Jacobian restricted to
  perturbations where the heads differ, weighted by a contrast `w ⊥ 1`, is `I_{H−1} ⊗ B(t)`;
- the tangent-linear equation `dΦ/dt = B(t) Φ` along the symmetric trajectory and the growth rate
  `λ(t) = max Re eig B(t)` ([`linear_stability`][]);
- the escape time it predicts at dimension D ([`predicted_escape_times`][]);
- long-time states: fixed points reached by integration, checked for stationarity, with an
  optional Newton polish and, on slow manifolds, a pseudo-transient continuation
  ([`find_fixed_point`][]).

Jacobians are forward-mode autodiff of the ODE right-hand side; the square root `r^{1/2}` has a
JVP that stays valid at the repeated eigenvalues of the symmetric point.
"""

from ._escape import crossing_times as crossing_times
from ._escape import initial_contrasts as initial_contrasts
from ._escape import linear_spread as linear_spread
from ._escape import predicted_escape_times as predicted_escape_times
from ._fixed_points import GROWTH_TOL as GROWTH_TOL
from ._fixed_points import STATIONARY_ATOL as STATIONARY_ATOL
from ._fixed_points import STATIONARY_Z as STATIONARY_Z
from ._fixed_points import STEP_TRUST as STEP_TRUST
from ._fixed_points import STIFFNESS as STIFFNESS
from ._fixed_points import TRUST_RADIUS as TRUST_RADIUS
from ._fixed_points import Chunks as Chunks
from ._fixed_points import continuation as continuation
from ._fixed_points import FixedPoint as FixedPoint
from ._fixed_points import NewtonPolish as NewtonPolish
from ._fixed_points import Polish as Polish
from ._fixed_points import Stationarity as Stationarity
from ._fixed_points import StationarityTest as StationarityTest
from ._fixed_points import find_fixed_point as find_fixed_point
from ._fixed_points import newton_polish as newton_polish
from ._fixed_points import stationarity as stationarity
from ._fixed_points import stiffness as stiffness
from ._modes import HeadModes as HeadModes
from ._modes import bias_is_inert as bias_is_inert
from ._modes import helmert as helmert
from ._symmetric import EQUIVARIANT_GROUP as EQUIVARIANT_GROUP
from ._symmetric import SymmetricField as SymmetricField
from ._symmetric import equivariant_field as equivariant_field
from ._symmetric import flatten as flatten
from ._symmetric import head_average as head_average
from ._symmetric import head_differences as head_differences
from ._symmetric import unflatten as unflatten
from ._tangent import StabilityResult as StabilityResult
from ._tangent import default_modes as default_modes
from ._units import UnitModes as UnitModes
from ._units import unit_average as unit_average
from ._tangent import growth_matrix as growth_matrix
from ._tangent import leading_mode as leading_mode
from ._tangent import linear_stability as linear_stability
from ._tangent import restricted_jacobian as restricted_jacobian
