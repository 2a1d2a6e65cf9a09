"""The model family (`docs/models.md`). Adding a model: one file with an [`AbstractModel`][]
subclass decorated with [`register_model`][]; the engine (vector fields, ODE, SDE, weight- and
overlap-space SGD, risk) runs it with no other file touched. The attention model of the rest of
`dynamics` is `kind = "attention"`."""

from ._base import AbstractModel as AbstractModel
from ._base import GramState as GramState
from ._base import ModelWeights as ModelWeights
from ._base import Readout as Readout
from ._base import gaussian_rows as gaussian_rows
from ._base import model_class as model_class
from ._base import model_kinds as model_kinds
from ._base import register_model as register_model
from ._base import unregister_model as unregister_model
from ._increment import assemble as assemble
from ._increment import exact_moments as exact_moments
from ._increment import sample_gradients as sample_gradients
from ._increment import sample_increment as sample_increment
from ._risk import model_risk as model_risk
from ._committee import Committee as Committee  # noqa: I001
