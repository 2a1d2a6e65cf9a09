"""The model family (`docs/models.md`). Adding a model: one file with an [`AbstractModel`][]
subclass, its parameters declared as fields ([`param`][]) and its Gram layout as [`Rows`][];
the engine (vector fields, ODE, SDE, weight- and overlap-space SGD, risk, the config tables and
the command line) runs it with no other file touched, named on the command line as
`kind = "file.py:ClassName"`, `"package.module:ClassName"`, a name registered with
[`register_model`][] or an entry point of the group `headflow.models`. The attention model of
the rest of `headflow.dynamics` is `kind = "attention"`."""

from ._model import AbstractModel as AbstractModel
from ._base import GramState as GramState
from ._base import ModelBase as ModelBase
from ._base import ModelWeights as ModelWeights
from ._base import Readout as Readout
from ._base import gaussian_rows as gaussian_rows
from ._base import sphere_rows as sphere_rows
from ._base import model_class as model_class
from ._base import model_kinds as model_kinds
from ._base import register_model as register_model
from ._base import unregister_model as unregister_model
from ._symmetry import AbstractSymmetry as AbstractSymmetry
from ._symmetry import SignFlip as SignFlip
from ._increment import assemble as assemble
from ._loading import ENTRY_POINTS as ENTRY_POINTS
from ._loading import resolve_kind as resolve_kind
from ._params import CurvePoint as CurvePoint
from ._params import Hyperparameter as Hyperparameter
from ._params import Param as Param
from ._params import Rows as Rows
from ._params import describe as describe
from ._params import model_table as model_table
from ._params import param as param
from ._params import training_table as training_table
from ._increment import exact_moments as exact_moments
from ._increment import sample_gradients as sample_gradients
from ._increment import sample_increment as sample_increment
from ._risk import model_risk as model_risk
from ._sgd import AbstractSGD as AbstractSGD
from ._sgd import ChainSGD as ChainSGD
from ._sgd import WeightSGD as WeightSGD
from ._sgd import family_sgd as family_sgd
from ._committee import Committee as Committee  # noqa: I001
from ._single_index import SingleIndex as SingleIndex
from ._multi_index import MultiIndex as MultiIndex
