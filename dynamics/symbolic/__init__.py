"""Symbolic derivation of the order-parameter ODEs (`docs/ode.md#derivation-of-the-odes`), rendered
and turned into code.

- [`local_field_ode`][]: SGD step → overlap increments → high-dimensional limit (generic).
- [`manifold_ode`][]: the reduced system on the invariant manifold, per activation, with the
  activation Jacobians derived from the definitions ([`derive_jacobians`][]).
- [`generate`][]: the system written out for given sizes and lambdified to JAX;
  [`SymbolicField`][] is the diffrax vector field built on it (`[ode] rhs = "symbolic"`).
- `python -m headflow.dynamics.symbolic` regenerates `docs/equations.md` (`--check`: exit 1 if
  stale).
"""

from ._activations import SymbolicActivation as SymbolicActivation
from ._activations import symbolic_activation as symbolic_activation
from ._activations import symbolic_names as symbolic_names
from ._activations import derive_jacobians as derive_jacobians
from ._algebra import Expect as Expect
from ._algebra import tidy as tidy
from ._closed import limits as limits
from ._closed import paper_variables as paper_variables
from ._closed import risk as risk
from ._codegen import Generated as Generated
from ._codegen import generate as generate
from .._source_cache import set_source_cache as set_source_cache
from ._derive import Equation as Equation
from ._derive import Manifold as Manifold
from ._derive import local_field_ode as local_field_ode
from ._derive import manifold_ode as manifold_ode
from ._field import SymbolicField as SymbolicField
from ._render import latex as latex
from ._render import render as render
from ._render import render_activation as render_activation
from ._readout import ReadoutODE as ReadoutODE
from ._readout import readout_ode as readout_ode
from ._readout import readout_rhs as readout_rhs
