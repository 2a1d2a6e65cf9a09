"""The diffusion (SDE) limit of the order parameters at finite D, for every model
(`docs/sde.md`)."""

from ._diffusion import AbstractDiffusion as AbstractDiffusion
from ._diffusion import centred_factor as centred_factor
from ._run import SDEResult as SDEResult
from ._run import build_sde as build_sde
from ._run import drift_samples as drift_samples
from ._run import noise_samples as noise_samples
from ._run import initial_states as initial_states
from ._run import path_keys as path_keys
from ._run import run_sde as run_sde
from ._run import solve_groups as solve_groups
from ._run import SDESetup as SDESetup
from ._run import sde_setup as sde_setup
from ._solve import NOISE_FACTORS as NOISE_FACTORS
from ._solve import BROWNIAN as BROWNIAN
from ._solve import AbstractBrownian as AbstractBrownian
from ._solve import BrownianTree as BrownianTree
from ._solve import GridIncrements as GridIncrements
from ._solve import StepIncrements as StepIncrements
from ._solve import get_brownian as get_brownian
from ._solve import SOLVERS as SOLVERS
from ._solve import OverlapSDE as OverlapSDE
from ._solve import domain as domain
from ._solve import get_sde_solver as get_sde_solver
from ._solve import solve_paths as solve_paths
from ._solve import step_grid as step_grid
from ._solve import DriftHeun as DriftHeun
from ._solve import in_domain as in_domain
from ._models import ModelDiffusion as ModelDiffusion
from ._models import noise_rule as noise_rule
from ._models import FamilySDEStart as FamilySDEStart
from ._models import SDECurve as SDECurve
from ._models import sde_curve_from_config as sde_curve_from_config
