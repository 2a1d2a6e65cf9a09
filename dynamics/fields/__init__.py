"""Order-parameter vector fields (`docs/ode.md#derivation-of-the-odes`): the reduced form on the
invariant manifold and the generic local-field form, both averages over Gaussian nodes of
derivatives taken by autodiff of [`dynamics.Model`][]'s predictor, the code the simulator runs."""

from ._base import AbstractField as AbstractField
from ._full import FullField as FullField
from ._manifold import ManifoldField as ManifoldField
from ._moments import fourth_moment as fourth_moment
from ._moments import third_moment as third_moment
from ._sampled import SampledFullField as SampledFullField
from ._sampled import sample_increment as sample_increment
from ._sampled import split_full_node as split_full_node
from ._nodes import MAX_GROUP as MAX_GROUP
from ._nodes import full_dims as full_dims
from ._nodes import full_nodes as full_nodes
from ._nodes import head_permutations as head_permutations
from ._nodes import key_nodes as key_nodes
from ._model import ExactField as ExactField
from ._model import ModelField as ModelField
from ._model import has_exact_field as has_exact_field
from ._model import model_dims as model_dims
from ._model import model_nodes as model_nodes
from ._model import sample_fields as sample_fields
