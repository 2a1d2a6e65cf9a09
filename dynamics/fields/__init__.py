"""Order-parameter vector fields of a model of the family (`docs/models.md`): averages over
Gaussian nodes of the SGD increment computed by autodiff of the model's predictor
([`ModelField`][]), or closed-form Gaussian integrals ([`ExactField`][]), on nodes closed under
the model's symmetry group (`docs/ode.md#nodes`). The attention model's structured fields are in
[`headflow.dynamics.models.attention`][]."""

from ._base import AbstractField as AbstractField
from ._moments import fourth_moment as fourth_moment
from ._moments import third_moment as third_moment
from ._nodes import MAX_GROUP as MAX_GROUP
from ._nodes import Group as Group
from ._nodes import product_group as product_group
from ._nodes import row_group as row_group
from ._nodes import unit_permutations as unit_permutations
from ._model import ExactField as ExactField
from ._model import ModelField as ModelField
from ._model import exact_backend as exact_backend
from ._model import exact_field as exact_field
from ._model import has_closed_field as has_closed_field
from ._model import has_exact_field as has_exact_field
from ._model import model_dims as model_dims
from ._model import model_group as model_group
from ._model import model_nodes as model_nodes
from ._model import sample_fields as sample_fields
