"""The attention model's SDE: the full local-field drift and the diffusion of the overlaps, and
the random start of each path, registered with the generic engine (`headflow.dynamics.hooks`)."""

from __future__ import annotations

from jax.tree_util import Partial

from ..._errors import HeadflowError
from ...hooks import check_dim, sde_terms, start_sampler
from ..._model import Model
from ..._steps import StepSizes
from ...config import Config
from ...expectations import AbstractExpectation, MonteCarlo
from ...ode import traced_values
from ...sde import noise_samples
from ._diffusion import Diffusion
from ._full import FullField
from ._start import random_start


@sde_terms.register(Model)
def _sde_terms(model: Model, cfg: Config, drift_backend: AbstractExpectation,
               noise_backend: AbstractExpectation | None) -> tuple[FullField, Diffusion]:
    """Drift `FullField` (η² terms kept) and the diffusion of all fields (on `noise_backend`,
    default [`headflow.dynamics.sde.noise_samples`][] Monte Carlo nodes)."""
    if noise_backend is None:
        noise_backend = MonteCarlo(samples=noise_samples(cfg), seed=cfg.ode.seed)
    mt = traced_values(model)
    steps = traced_values(StepSizes.from_config(cfg.training))
    return (FullField.build(mt, steps, drift_backend, sgd_noise=True),
            Diffusion.build(mt, steps, noise_backend, sgd_noise=True))


@start_sampler.register(Model)
def _start_sampler(model: Model, cfg: Config) -> Partial:
    """[`random_start`][] with the scales of `[training]`."""
    tr = cfg.training
    return Partial(random_start, model, key_std=float(tr.init_key_std),
                   value_std=float(tr.init_value_std), bias=float(tr.init_bias))


@check_dim.register(Model)
def _check_dim(model: Model, dim: int) -> None:
    if dim < model.F + 1:
        raise HeadflowError(f"--dim {dim}: must exceed model.F = {model.F} (the teacher needs "
                            "F + 1 orthogonal directions)")
