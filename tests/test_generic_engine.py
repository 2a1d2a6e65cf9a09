"""The generic engine holds nothing of any one model: the vector fields, the ODE, the SDE, the
weight-space SGD and the overlap-space chain (`dynamics/fields`, `dynamics/ode`, `dynamics/sde`,
the modules of `sims` outside `sims/attention`) and the model interface
(`dynamics/models/_model.py`) name none of the attention model's order parameters or types, and
import neither its package nor another model's. What differs between models comes from the
model's own methods (`headflow.dynamics.models.AbstractModel`): there is no dispatch registry
beside them, every built-in model is a subclass of the public interface, and the engine calls
nothing on a model that the public interface does not define.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import tokenize
from pathlib import Path

import numpy as np
import pytest

from headflow import dynamics
from headflow.dynamics import Model, load_config
from headflow.dynamics.models import AbstractModel, Committee, model_class, model_kinds

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "validation" / "configs"
GENERIC = sorted([*ROOT.glob("dynamics/fields/*.py"), *ROOT.glob("dynamics/ode/*.py"),
                  *ROOT.glob("dynamics/sde/*.py"), *ROOT.glob("sims/*.py"),
                  ROOT / "dynamics" / "models" / "_model.py",
                  ROOT / "dynamics" / "models" / "_sgd.py", ROOT / "dynamics" / "_wishart.py"])
ATTENTION_NAMES = {"m", "q", "kv", "kvs", "vks", "SIGNAL", "Overlaps", "FieldLaw", "Model"}
ENGINE = ("vector_field", "ode_start", "ode_state", "state_risk", "ode_info", "curve_start",
          "curve_risk", "hyperparameters", "sde_terms", "start_sampler", "check_dim", "sgd")
"""The methods through which the generic runs reach a model (`AbstractModel`)."""


def _code_names(path: Path) -> set[str]:
    """Every identifier in the code of `path` (comments and strings, docstrings included,
    left out)."""
    toks = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return {t.string for t in toks if t.type == tokenize.NAME}


def test_generic_modules_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in GENERIC}
    for want in ("dynamics/fields/_base.py", "dynamics/ode/_run.py", "dynamics/sde/_run.py",
                 "dynamics/sde/_diffusion.py", "sims/_simulate.py", "sims/_models.py",
                 "dynamics/models/_sgd.py", "dynamics/models/_model.py"):
        assert want in names


@pytest.mark.parametrize("path", GENERIC, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_attention_names_in_generic_modules(path):
    found = _code_names(path) & ATTENTION_NAMES
    assert not found, f"{path.relative_to(ROOT)} uses the attention model's names {found}"


@pytest.mark.parametrize("path", GENERIC, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_generic_modules_import_no_model(path):
    if path.name == "__init__.py":      # a package's init may import a model to register it
        return
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            where = "." * node.level + (node.module or "")
            names = {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            where, names = "", {a.name for a in node.names}
        else:
            continue
        assert not any(part in ("attention", "_committee")
                       for part in where.replace(".", " ").split()), \
            f"{path.relative_to(ROOT)} imports a model: from {where}"
        assert not names & {"Model", "Committee", "attention"}, \
            f"{path.relative_to(ROOT)} imports a model: {names}"


def _singledispatch_modules(top: str) -> list[str]:
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / top).rglob("*.py")
                  if "singledispatch" in _code_names(p))


@pytest.mark.parametrize("top", ["dynamics", "sims", "validation"])
def test_no_dispatch_registry(top):
    """The ODE, the SDE and SGD reach a model through its methods only: no
    `functools.singledispatch` anywhere."""
    assert _singledispatch_modules(top) == []


def test_every_built_in_model_is_a_member():
    """Each kind shipped is a subclass of the public interface, registered by the public
    `register_model`, and answers every engine method."""
    for kind in model_kinds():
        cls = model_class(kind)
        assert issubclass(cls, AbstractModel), kind
        for name in ENGINE:
            assert callable(getattr(cls, name)), (kind, name)
    assert model_class("attention") is Model and model_class("committee") is Committee
    assert issubclass(Model, AbstractModel) and not inspect.isabstract(Model)
    own = {n for n in ENGINE if n in vars(Model)}
    assert own == set(ENGINE), own          # it overrides them all
    assert not {n for n in ENGINE if n in vars(Committee)}   # the family's defaults
    from headflow.dynamics.ode import LearningCurve
    from headflow.dynamics.sde import SDECurve

    for name in ("demo", "committee"):      # one curve class each, whatever the model
        # (the autodiff field: the class does not depend on it, and no sympy derivation runs)
        cfg = load_config(CONFIGS / f"{name}.toml").replace(**{"training.t_max": 1.0,
                                                              "ode.rhs": "autodiff"})
        assert type(dynamics.ode.curve_from_config(cfg)) is LearningCurve
        assert type(dynamics.sde.sde_curve_from_config(cfg, paths=2)) is SDECurve


def test_every_models_config_is_derived_from_its_fields():
    """No built-in model writes its config: `section`, `training`, `from_config` and
    `describe` are the family's, and every `[model]` and `[training]` key (beyond the
    engine's) is a field declared with `param`."""
    from headflow.dynamics.models._params import params_of

    derived = ("section", "training", "from_config", "describe")
    engine_keys = {"kind", "lr", "weight_decay", "batch", "t_max", "lr_schedule"}
    for kind in model_kinds():
        cls = model_class(kind)
        assert not {n for n in derived if n in vars(cls)}, kind
        declared = {p.key or n for n, p in params_of(cls)}
        scalar = {cls.lr_bias_key, f"{cls.lr_bias_key}_schedule"}
        for table in (cls.section(), cls.training()):
            keys = {f.name for f in dataclasses.fields(table)}
            assert keys - engine_keys - scalar <= declared, (kind, keys - declared)
    att = dynamics.Config()
    faster = att.replace(**{"training.lr": 2.0}).training
    assert att.training.scalar_step() == 1.0 and faster.scalar_step() == 1.0
    model = att.build_model()
    assert (model.L, model.H, model.F) == (att.model.L, att.model.H, att.model.F)
    assert model.prior == att.build_prior() and model.init_key_std == att.training.init_key_std
    with pytest.raises(dynamics.ConfigError, match="model.F = 1: the prior has F = 2"):
        Model(L=3, H=2, activation=model.activation,
              prior=dynamics.priors.FlippedSpike(2.0, 0.7, [1.0, 0.0]))


def _model_attributes(path: Path) -> set[str]:
    """The attributes the code of `path` reads on a model: `model.x`, `self.model.x`,
    `p.model.x`, `field.model.x`, `s.model.x`."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            v = node.value
            if ((isinstance(v, ast.Name) and v.id == "model")
                    or (isinstance(v, ast.Attribute) and v.attr == "model")):
                out.add(node.attr)
    return out


@pytest.mark.parametrize("path", [p for p in GENERIC if p.name != "_model.py"],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_engine_uses_only_the_public_interface(path):
    """No private hook: what the generic modules read on a model is a public attribute of
    `AbstractModel` (a method or declaration a user's model has by the same name)."""
    public = {n for n in dir(AbstractModel) if not n.startswith("_")}
    used = _model_attributes(path)
    assert used <= public, f"{path.relative_to(ROOT)} reads {sorted(used - public)} on a model"


def test_every_model_simulates_through_its_maps():
    """`run_sgd` runs whatever exact maps the model's `sgd` method returns: both kinds shipped
    give theirs for both spaces (`AbstractSGD`), and the attention model overrides `sgd`."""
    from headflow.dynamics.models import AbstractSGD, ChainSGD, WeightSGD
    from headflow.dynamics.models.attention import AttentionChainSGD, AttentionWeightSGD

    want = {("committee", "weights"): WeightSGD, ("committee", "overlaps"): ChainSGD,
            ("demo", "weights"): AttentionWeightSGD, ("demo", "overlaps"): AttentionChainSGD}
    for (name, space), cls in want.items():
        cfg = load_config(CONFIGS / f"{name}.toml").replace(**{"sim.space": space})
        sgd = cfg.build_model().sgd(cfg, dim=400)
        assert type(sgd) is cls and isinstance(sgd, AbstractSGD) and sgd.dim == 400
    assert "sgd" in vars(Model) and "sgd" not in vars(Committee)


def test_attention_is_registered_on_import():
    assert dynamics.attention is dynamics.models.attention


@pytest.mark.slow
def test_build_turns_a_config_into_objects():
    """`headflow.dynamics.ode.build` is where a config's strings become objects, for every model:
    the attention model's generated field, the committee's closed forms, and for a unit without
    closed forms (ReLU) nodes sized by the pilot run of `[ode] samples = "auto"`."""
    from headflow.dynamics.fields import ExactField, ModelField
    from headflow.dynamics.ode import build, error_target, relative_error, solve_problem
    from headflow.dynamics.symbolic import SymbolicField

    demo = load_config(CONFIGS / "demo.toml").replace(**{"training.t_max": 1.0,
                                                         "ode.samples": 256})
    p = build(demo)
    assert isinstance(p.field, SymbolicField) and p.sizing == {}
    assert isinstance(p.model, Model) and p.steps is p.field.steps
    com = load_config(CONFIGS / "committee.toml").replace(**{"training.t_max": 2.0})
    assert isinstance(build(com).field, ExactField)
    relu = com.replace(**{"model.activation": "relu", "ode.expectation": "qmc",
                          "ode.samples": "auto"})
    p = build(relu)
    assert isinstance(p.field, ModelField)
    n = p.sizing["samples"]
    assert p.cfg.ode.samples == n and n & (n - 1) == 0 and n >= p.sizing["pilot_samples"]
    assert np.isfinite(p.sizing["pilot_error"]) and p.sizing["target"] == error_target(relu)
    res = solve_problem(p)
    err = float(np.max(relative_error(p.field, res.overlaps)))
    print(f"relu committee: pilot error {p.sizing['pilot_error']:.3g} at "
          f"{p.sizing['pilot_samples']} nodes -> {n} nodes, error {err:.3g} "
          f"(target {p.sizing['target']:.3g})")
    assert err <= 2 * p.sizing["target"] or n == dynamics.expectations.AUTO_MAX_SAMPLES


def test_one_segment_driver():
    """Every simulator (the family's in both spaces, the attention model's weights and chain)
    is a model's exact maps run by `headflow.sims._runs.simulate_sgd` through `run_segments`:
    no other module shards, cuts the run into segments, polls for a stop or draws a progress
    bar, and no simulator loops over segments itself."""
    driver = ROOT / "sims" / "_runs.py"
    names = {"check_stop", "tqdm", "segment_plan", "shard_batch"}
    for path in sorted([*(ROOT / "sims").rglob("*.py"),
                        *(ROOT / "dynamics" / "models").rglob("*.py")]):
        if path == driver:
            continue
        found = _code_names(path) & names
        assert not found, f"{path.relative_to(ROOT)} runs its own segments: {found}"
    users = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "sims").rglob("*.py"))
             if "run_segments" in _code_names(p) and p != driver]
    assert users == [], users           # they call `simulate_sgd`, which calls it
    callers = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "sims").rglob("*.py"))
               if "simulate_sgd" in _code_names(p) and p != driver
               and p.name != "__init__.py"]      # the package re-exports it
    assert callers == ["sims/_models.py", "sims/_simulate.py", "sims/attention/_simulate.py"]


def test_hyperparameters_read_and_replace_their_leaves():
    """A model's `Hyperparameter`s set the leaves their keys name in a `CurvePoint`: the step
    `training.lr` sets `η` and the readout's step with it (no `lr_second` given), a float
    field sets the model's, an attention initial scale sets the start's, and each reads back
    what it set."""
    from headflow.dynamics.models import CurvePoint

    cfg = load_config(CONFIGS / "committee.toml")
    model = cfg.build_model()
    field = model.vector_field(cfg, sgd_noise=True)
    point = CurvePoint(field=field, start=model.curve_start(cfg))
    hps = {h.key: h for h in model.hyperparameters(cfg, field.steps)}
    assert {"training.lr", "training.weight_decay", "model.noise"} <= set(hps)
    lr = hps["training.lr"].set(point, 0.375)
    assert float(lr.steps.lr) == 0.375 and float(lr.steps.lr_bias) == 0.375
    assert float(hps["training.lr"].get(lr)) == 0.375
    assert float(lr.model.noise) == float(field.model.noise)
    noisy = hps["model.noise"].set(point, 0.25)
    assert float(noisy.model.noise) == 0.25 and float(noisy.steps.lr) == float(field.steps.lr)
    assert float(hps["model.noise"].get(noisy)) == 0.25

    # (the autodiff field: what is checked does not depend on it, and no sympy derivation runs)
    demo = load_config(CONFIGS / "demo.toml").replace(**{"ode.rhs": "autodiff"})
    att = demo.build_model()
    afield = att.vector_field(demo, sgd_noise=True)
    apoint = CurvePoint(field=afield, start=att.curve_start(demo))
    ahps = {h.key: h for h in att.hyperparameters(demo, afield.steps)}
    wide = ahps["training.init_key_std"].set(apoint, 0.5)
    assert float(wide.start.key_std) == 0.5 and float(apoint.start.key_std) != 0.5
    amp = ahps["prior.amplitude"]
    assert float(amp.get(apoint)) == float(demo.prior.amplitude)


def test_the_config_knows_no_model():
    """`dynamics/config.py` holds the engine's sections only: `[model]` and `[training]` are
    the model class's own tables, its checks are the class's `check_config`, and `[prior]` is
    read only by a model that declares it (`extra_sections`)."""
    from headflow.dynamics import config

    names = _code_names(ROOT / "dynamics" / "config.py")
    assert not names & {"ModelSection", "TrainingSection", "Model", "Committee", "L", "H"}
    assert type(dynamics.Config().model) is Model.section()
    committee = load_config(CONFIGS / "committee.toml")
    assert type(committee.model) is Committee.section()
    assert type(committee.training) is Committee.training()
    assert config.DEFAULT_KIND == "attention" and "kind" not in dynamics.Config().to_dict()["model"]
    assert "prior" in Model.extra_sections and "prior" not in Committee.extra_sections
    assert "prior" not in committee.to_dict() and "prior" in dynamics.Config().to_dict()
