"""The diffusion (SDE) limit of the order parameters at finite D (`docs/sde.md`)."""

from ._diffusion import Diffusion as Diffusion
from ._diffusion import centred_factor as centred_factor
from ._diffusion import entry_names as entry_names
from ._diffusion import flatten as flatten
from ._diffusion import increments as increments
from ._diffusion import n_entries as n_entries
from ._diffusion import unflatten as unflatten
from ._curve import SDECurve as SDECurve
from ._run import SDEResult as SDEResult
from ._run import build_sde as build_sde
from ._run import drift_samples as drift_samples
from ._run import initial_states as initial_states
from ._run import path_keys as path_keys
from ._run import run_sde as run_sde
from ._solve import NOISE_FACTORS as NOISE_FACTORS
from ._solve import SOLVERS as SOLVERS
from ._solve import OverlapSDE as OverlapSDE
from ._solve import domain as domain
from ._solve import get_sde_solver as get_sde_solver
from ._solve import solve_paths as solve_paths
from ._solve import step_grid as step_grid
from ._solve import DriftHeun as DriftHeun
from ._models import ModelDiffusion as ModelDiffusion
from ._models import build_model_sde as build_model_sde
from ._diffusion import AbstractDiffusion as AbstractDiffusion
from ._solve import in_domain as in_domain
