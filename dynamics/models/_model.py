"""The model interface (`docs/models.md#adding-a-model`): [`AbstractModel`][], the
mathematics of a model ([`ModelBase`][headflow.dynamics.models.ModelBase]) together with what
the engine computes from it. Every question the generic runs
(`headflow.dynamics.ode.run_ode`, `headflow.dynamics.sde.run_sde`, `headflow.sims.run_sgd`)
ask of a model is a method here, with the generic answer of the family as its default; a
model with more structure to exploit overrides it (the attention model:
`dynamics/models/attention/`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import jax.numpy as jnp
from jax.tree_util import Partial
from jaxtyping import Array, Float

from .._errors import ConfigError, HeadflowError, check_memory
from ..config import Config
from ..expectations import AbstractExpectation
from ..fields import MAX_GROUP, AbstractField, has_exact_field
from ..ode._models import (FamilyRisk, FamilyStart, frozen_init, model_field, model_start,
                          named_start, risk_rule, states_risk)
from ..sde._diffusion import AbstractDiffusion
from ..sde._models import FamilySDEStart, model_sde_terms, model_start_sampler
from .._steps import StepSizes
from ._base import ModelBase
from ._sgd import AbstractSGD, family_sgd


class AbstractModel(ModelBase):
    """A model of the family, written as its mathematics (`docs/models.md#adding-a-model`).

    A concrete model is a subclass that sets `kind` (its name), declares its Gram layout
    `rows` ([`Rows`][headflow.dynamics.models.Rows]) and its parameters as fields made with
    [`param`][headflow.dynamics.models.param], and implements `predict` and `target`.
    Everything else has a generic default that a model may override with a method of its own.

    **Its mathematics** (the methods of [`ModelBase`][headflow.dynamics.models.ModelBase];
    the defaults derive from `rows` and the fields):

    - `predict(params, λ)`, `target(params, λ*)` (required): the student's and the teacher's
      outputs on the fields; `loss` (default `½(ŷ − y)²`);
    - `n_students`, `n_teachers`, `named(state)`, `limit_state()`, `init_weights(key, dim)`:
      derived from `rows`;
    - `noise`: the standard deviation of the label noise, `y = target + σ ζ` (default: the
      field `noise` when the model declares one, else 0);
    - `params0()`: the scalar parameters at the start (default: none); `trained`: those SGD
      moves (step `η_p/D`, the `[training]` key `lr_bias_key`; default: none);
    - `spherical`: whether the students are kept on the sphere `|w_i|² = D` (default: False);
    - `symmetries()`: the exact sign flips of the model
      ([`SignFlip`][headflow.dynamics.models.SignFlip]; default: none);
    - `polynomial_degree()`, `loss_degree()`: the degrees that make its expectations exact
      (default: none, not a polynomial);
    - `escape_observable(named)`: what an escape is read from (default: the spread between
      students, or a single student's alignment);
    - `with_named(state, values)`: a state with order parameters set by name (`[ode] init`);
    - `readout(params)`: the [`Readout`][headflow.dynamics.models.Readout] structure, for
      exact expectations (default: none);
    - `layout`: which named order parameters the comparisons read
      ([`headflow.dynamics.Layout`][]);
    - `hyperparameters(cfg, steps)`: the differentiable config keys
      ([`Hyperparameter`][headflow.dynamics.models.Hyperparameter]s; default: the step sizes,
      the weight decay and every float field).

    **What the engine computes from it** (the defaults are the family's generic engine):
    [`vector_field`][], [`ode_start`][], [`ode_state`][], [`state_risk`][], [`ode_info`][],
    [`sde_terms`][], [`start_sampler`][], [`check_dim`][], the pieces of its differentiable
    learning curves ([`curve_start`][], [`curve_risk`][]; `hyperparameters` says which keys
    they differentiate) and [`sgd`][], its online SGD at finite D.

    The `[model]` and `[training]` tables, their validation, `--set`, `headflow models` and
    the differentiable hyperparameters are derived from the fields (`from_config`). A model is
    registered by [`headflow.dynamics.models.register_model`][], by an entry point of the group
    `headflow.models`, or named on the command line as `file.py:Class` or
    `package.module:Class` ([`headflow.dynamics.models.model_class`][]).
    """

    # -- the config ---------------------------------------------------------------------------
    @classmethod
    def default_expectation(cls, model: Any, training: Any, *,
                            checked: bool = False) -> str | None:
        """`[ode] expectation` when a config does not say, from its validated `[model]` and
        `[training]` tables: `"exact"` for a model with exact expectations (closed forms, or
        exact rules for a polynomial), else `"qmc"`. None: the `[ode]` section's default.
        The model's declarations are checked first unless `checked` (the tables of a whole
        config, whose `check_config` checked them)."""
        built = cls.from_config(SimpleNamespace(model=model, training=training))
        if not checked:
            built.check()
        return "exact" if has_exact_field(built) else "qmc"

    @classmethod
    def check_config(cls, cfg: Config) -> dict[str, Any]:
        """One-line [`headflow.dynamics.ConfigError`][]s for a config whose sections do not
        fit the model (its declarations, `ode.expectation = "exact"` without exact
        expectations, an `[ode] init` table that is not a valid start, a dimension too small
        for the overlap chain) or whose arrays cannot fit in memory. Returns sections to
        replace with their resolved form (none here)."""
        model = cfg.build_model()
        model.check()
        kind = cfg.model_kind
        if cfg.ode.expectation == "exact" and not has_exact_field(model):
            raise ConfigError(f"ode.expectation = 'exact': model.kind = {kind!r}"
                              + (f" with model.activation = {cfg.model.activation!r}"
                                 if hasattr(cfg.model, "activation") else "")
                              + " has no closed-form Gaussian integrals for the drift; choose "
                              "'mc', 'qmc', 'quadrature' or 'sparse'")
        if isinstance(cfg.ode.init, dict):
            model.check_state(model.with_named(model.limit_state(), cfg.ode.init),
                              what="ode.init")
        S, P = model.n_students, model.n_rows
        if cfg.ode.expectation == "exact":     # the four-point integrals of every quadruple
            check_memory(f"{S} student and {P - S} teacher units with ode.expectation = "
                         "'exact' (the closed-form drift's four-point integrals)",
                         8.0 * 16 * S * S * P * P * 3)
        need = P + cfg.training.batch + 1
        if cfg.sim.space == "overlaps" and cfg.sim.dim < need:
            raise ConfigError(f"sim.dim = {cfg.sim.dim}: sim.space = 'overlaps' needs "
                              f"D >= N + B + 1 = {need} (the Wishart remainder)")
        if cfg.sim.space == "weights":
            check_memory(f"sim.dim = {cfg.sim.dim} with sim.seeds = {cfg.sim.seeds}",
                         8.0 * cfg.sim.dim * cfg.sim.seeds * (P + 1))
        return {}

    # -- the ODE ------------------------------------------------------------------------------
    def vector_field(self, cfg: Config, backend: AbstractExpectation | None = None, *,
                     sgd_noise: bool, max_group: int = MAX_GROUP) -> AbstractField:
        """The ODE's vector field of `cfg` on `backend`'s nodes (None: those of `[ode]`),
        keeping the `η²` terms when `sgd_noise`. Default: closed forms where `[ode]
        expectation = "exact"`, else the autodiff field of the increment
        ([`headflow.dynamics.fields.ModelField`][])."""
        return model_field(cfg, self, backend, sgd_noise=sgd_noise, max_group=max_group)

    def ode_start(self, cfg: Config) -> Any:
        """The ODE's start that `[ode] init` names: one random initialization at `sim.dim`,
        its D → ∞ limit, or named order parameters (the rest from that limit)."""
        return model_start(cfg, self)

    def ode_state(self, cfg: Config, state: Any) -> Any:
        """A start of the ODE as the configured vector field reads it (default: unchanged)."""
        del cfg
        return state

    def state_risk(self, cfg: Config, states: Any, backend: AbstractExpectation | None = None
                   ) -> tuple[Any, Any]:
        """`(risk, its error)` at every state of `states` (any leading batch axes), arrays of
        the batch shape. `backend`: the ODE's expectation backend when the states are an ODE
        trajectory; None: the rule SGD and the SDE record the risk with. Default: the closed
        form or exact rule where the model has one, else `[sim] risk_samples` Monte Carlo
        nodes of seed `[ode] seed` (common random numbers), in either case."""
        del backend
        return states_risk(self, states, risk_rule(cfg))

    def ode_info(self, cfg: Config, field: AbstractField) -> dict[str, Any]:
        """What the ODE's accuracy report says about the vector field beyond its measured
        error (default: nothing)."""
        del cfg, field
        return {}

    def curve_start(self, cfg: Config, *, sde: bool = False) -> Any:
        """The start of the differentiable learning curves: a callable pytree
        `start(model, key, dim)` whose leaves the model's hyperparameters may select (its own
        initial scales), called with the model the curve substituted. `sde`: the start of each
        path of the SDE's curve (else the ODE's). Default: what `[ode] init` names, drawn
        with the substituted model ([`headflow.dynamics.ode.FamilyStart`][],
        [`headflow.dynamics.sde.FamilySDEStart`][])."""
        if sde:
            return FamilySDEStart(named=named_start(cfg, self))
        return FamilyStart(init=frozen_init(cfg.ode.init))

    def curve_risk(self, cfg: Config, *, sde: bool = False) -> Any:
        """The risk the differentiable learning curves record: a callable pytree
        `risk(model, state)` on fixed nodes. Default: the closed form or exact rule where the
        model has one, else `[sim] risk_samples` Monte Carlo nodes of seed `[ode] seed`
        ([`headflow.dynamics.ode.FamilyRisk`][]), for the ODE and the SDE alike."""
        del sde
        return FamilyRisk(nodes=risk_rule(cfg).nodes(self.n_rows))

    # -- the SDE ------------------------------------------------------------------------------
    def sde_terms(self, cfg: Config, drift_backend: AbstractExpectation | None,
                  noise_backend: AbstractExpectation | None
                  ) -> tuple[AbstractField, AbstractDiffusion]:
        """`(drift, diffusion)` of the SDE: the vector field with its `η²` terms (on
        `drift_backend`'s nodes), and the diffusion on `noise_backend`'s nodes (None: the
        default rule, exact for polynomial models, else sized from the increments' kurtosis;
        `docs/sde.md`)."""
        return model_sde_terms(self, cfg, drift_backend, noise_backend)

    def start_sampler(self, cfg: Config) -> Partial:
        """A pytree callable `sample(key, dim)`: the start of one SDE path at dimension `dim`,
        exact in law at any D (as SGD starts), or the start `[ode] init` names."""
        return model_start_sampler(self, cfg)

    def start_dim(self, dim: int) -> int | Float[Array, ""]:
        """`dim` in the form the samples of [`start_sampler`][] take it: that of
        `initial_state` (a traced D for the Bartlett draw), and the int for a model that
        overrides `start_sampler` (its start may draw D-dimensional weights)."""
        if type(self).start_sampler is not AbstractModel.start_sampler:
            return int(dim)
        return super().start_dim(dim)

    def check_dim(self, dim: int) -> None:
        """A [`headflow.dynamics.HeadflowError`][] when `dim` is too small for the model
        (default: any `dim ≥ 1`)."""
        if dim < 1:
            raise HeadflowError(f"--dim {dim}: must be >= 1")

    # -- online SGD ---------------------------------------------------------------------------
    def sgd(self, cfg: Config, *, dim: int, start: Any = None) -> AbstractSGD:
        """Online SGD of `cfg` at dimension `dim` as exact maps for the simulators' driver
        (`headflow.sims.run_sgd`): `[training]`'s step sizes, in the space `[sim] space`
        names (the weights in `[sim] dtype`, or the exact chain of the order parameters),
        every seed from `start` (one state) when given, else from its random initialization.
        Default: the family's [`headflow.dynamics.models.WeightSGD`][] or
        [`headflow.dynamics.models.ChainSGD`][]."""
        return family_sgd(self, StepSizes.from_config(cfg.training), dim=dim,
                          space=cfg.sim.space, init=start, dtype=jnp.dtype(cfg.sim.dtype))
