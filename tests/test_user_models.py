"""A model from the user's own code, as the tutorial (`docs/models.md#adding-a-model`) writes it:
`examples/phase_retrieval/phase_retrieval.py`, run by `[model] kind = "file.py:Class"`, by
`"module:Class"` and, once its example package is installed, by its entry-point name.

Checked:

- the file is at most 40 lines, and its `[model]`/`[training]` tables are derived from its
  fields (defaults, bounds, one-line errors);
- its declared sign flip (`SignFlip(teacher=0)`) closes every node set, so the drift's `R`
  component at states with `R = 0` is at most 1e-14 for every backend and node count, where
  nodes closed only under the student permutations leave it far above round-off;
- the command line runs it (ode, sgd in both spaces, sde, compare), keeps `R = 0` from the
  symmetric start, refuses bad kinds in one line, and replays a result only while the model file
  is unchanged;
- an installed package's entry point registers it by name, and packages named `dynamics`,
  `sims` or `validation` elsewhere on the path do not disturb headflow.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import jax.numpy as jnp
import numpy as np
import pytest
from _util import FAST_COMPILE_ENV
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headflow.dynamics import ConfigError, StepSizes, load_config
from headflow.dynamics.expectations import MonteCarlo, Quadrature, QuasiMonteCarlo, SparseGrid
from headflow.dynamics.fields import ModelField, model_group
from headflow.dynamics.models import AbstractModel, GramState, Rows, SignFlip, model_class, param

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "phase_retrieval"
FILE_KIND = f"{EXAMPLE / 'phase_retrieval.py'}:PhaseRetrieval"
ENV = {**{k: v for k, v in os.environ.items() if k != "HEADFLOW_CACHE"}, **FAST_COMPILE_ENV}


def headflow(*argv: str, cwd: Path, env: dict | None = None, timeout: int = 600):
    return subprocess.run([sys.executable, "-m", "headflow.validation", *argv], cwd=cwd,
                          env={**ENV, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def PR():
    return model_class(FILE_KIND)


def test_tutorial_file_is_short_and_its_tables_are_derived(PR):
    assert len((EXAMPLE / "phase_retrieval.py").read_text().splitlines()) <= 40
    cfg = load_config(EXAMPLE / "run.toml")        # kind relative to the config file
    assert cfg.model.kind == FILE_KIND and type(cfg.model) is PR.section()
    model = cfg.build_model()
    assert isinstance(model, PR) and (model.n_students, model.n_teachers) == (1, 1)
    assert cfg.training.lr == 0.1 and cfg.training.lr_bias == 0.1
    assert "lr_params" not in vars(cfg.training)         # no trained scalars: no such key
    s0 = model.limit_state()
    np.testing.assert_array_equal(np.asarray(s0.gram), np.eye(2))
    named = model.named(s0)
    assert set(named) == {"Q", "R", "T"} and named["R"].shape == (1, 1)
    for bad, msg in ((["model.noise=-1"], "model.noise = -1.0: must be >= 0"),
                     (["model.init_std=0"], "model.init_std = 0.0: must be > 0"),
                     (["model.width=3"], "unknown config key model.width"),
                     (["training.lr_params=0.1"], "unknown config key training.lr_params")):
        with pytest.raises(ConfigError, match=msg.replace("(", r"\(")):
            load_config(EXAMPLE / "run.toml", bad)


BACKENDS = [MonteCarlo, QuasiMonteCarlo, Quadrature, SparseGrid]


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
@pytest.mark.parametrize("samples", [256, 1024, 4096])
def test_declared_sign_flip_keeps_the_equator_invariant(PR, backend, samples):
    """At states with `R = 0` the exact drift of `R` is 0 (the law is even in ν); on nodes
    closed under the declared flip it is 0 to round-off, at every node count. The same
    model without the declaration (nodes closed under the student permutations only) is off
    by far more: the test would catch a closure that ignores the flip."""
    model = PR(noise=0.2)
    steps = StepSizes(lr=0.3, lr_bias=0.3)
    bare = type("Undeclared", (PR,), {"symmetries": lambda self: ()})(noise=0.2)
    assert model_group(model)[0].shape[0] == 2 and model_group(bare)[0].shape[0] == 1
    for Q, T in ((1.0, 1.0), (0.3, 1.7), (2.5, 0.8)):
        state = GramState(gram=jnp.array([[Q, 0.0], [0.0, T]]), params={})
        drift = ModelField.build(model, steps, backend(samples=samples))(0.0, state)
        dR = float(drift.gram[0, 1])
        assert abs(dR) <= 1e-14, (Q, T, dR)
        assert float(abs(drift.gram[0, 0])) > 1e-3      # the field itself is not zero
        flipped = SignFlip(teacher=0).act(model, state)
        np.testing.assert_array_equal(np.asarray(flipped.gram), np.asarray(state.gram))
    if backend not in (Quadrature, SparseGrid):   # Gauss–Hermite rules are sign-symmetric
        off = ModelField.build(bare, steps, backend(samples=samples))(0.0, GramState(
            gram=jnp.array([[1.0, 0.0], [0.0, 1.0]]), params={}))
        assert abs(float(off.gram[0, 1])) > 1e-8


def test_bad_kinds_are_one_line_errors(tmp_path):
    (tmp_path / "broken.py").write_text("def oops(:\n")
    (tmp_path / "abstract.py").write_text(
        "from typing import ClassVar\n"
        "from headflow.dynamics.models import AbstractModel, Rows\n"
        "class Half(AbstractModel):\n"
        "    kind: ClassVar[str] = 'half'\n"
        "    rows: ClassVar[Rows] = Rows()\n"
        "    def predict(self, params, lam):\n"
        "        return lam[0]\n"
        "class NotAModel:\n"
        "    pass\n")
    cases = {
        "missing.py:M": "file .*missing.py not found",
        "broken.py:M": "loading .*broken.py failed: SyntaxError",
        "abstract.py:Nope": "has no class 'Nope' \\(it defines Half, NotAModel\\)",
        "abstract.py:NotAModel": "'NotAModel' is not a subclass of",
        "abstract.py:Half": "Half does not implement target",
        "no_such_package.mod:M": "no module named 'no_such_package'",
        "plainly_unknown": "unknown model; choose one of 'attention', 'committee'",
    }
    for kind, msg in cases.items():
        (tmp_path / "c.toml").write_text(f'[model]\nkind = "{kind}"\n')
        with pytest.raises(ConfigError, match=msg):
            load_config(tmp_path / "c.toml")
        if kind not in ("missing.py:M", "broken.py:M", "abstract.py:Half"):
            continue                      # the command line: three of them (each a process)
        done = headflow("ode", str(tmp_path / "c.toml"), "--out", str(tmp_path / "out"),
                        cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("headflow: error: model.kind"), lines
        assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_command_line_runs_the_users_file(tmp_path, capsys, monkeypatch):
    """ode (R stays 0 from the symmetric start) from the `headflow` command in a fresh process;
    sgd in weight and overlap space, sde with its escapes, and compare through the same
    command line called in this process (the session's compiled programs): each exits 0 and
    writes its results."""
    from headflow.validation.cli import main

    work = tmp_path / "pr"
    shutil.copytree(EXAMPLE, work)
    small = ["--set", "training.t_max=20"]
    done = headflow("ode", "run.toml", *small, "--set", 'ode.init="symmetric"', "--set",
                    'ode.expectation="qmc"', "--out", "ode", cwd=work)
    assert done.returncode == 0, done.stderr[-2000:]
    z = np.load(work / "ode" / "ode.npz")
    assert np.max(np.abs(z["R"])) == 0.0 and z["risk"][-1] < z["risk"][0]
    runs = {"sgd_w": ["sgd", "--set", "sim.dim=200", "--set", "sim.seeds=4"],
            "sgd_o": ["sgd", "--set", "sim.dim=200", "--set", "sim.seeds=4", "--set",
                      'sim.space="overlaps"'],
            "sde": ["sde", "--dim", "200", "--paths", "8"],
            "compare": ["compare", "--dim", "200", "--seeds", "8"]}
    monkeypatch.chdir(work)
    for name, argv in runs.items():
        assert main([argv[0], "run.toml", *small, *argv[1:], "--out", name, "--json"]) == 0
        assert (work / name / "meta.json").is_file(), name
        summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        if name == "sde":        # a single student's escapes, read from its alignment
            assert summary["escaped"] > 0 and summary["escape_quantiles"]["0.5"] is not None


def test_editing_the_model_file_changes_the_next_result(tmp_path):
    work = tmp_path / "pr"
    shutil.copytree(EXAMPLE, work)
    env = {"HEADFLOW_CACHE_DIR": str(tmp_path / "cache"), "HEADFLOW_CACHE": "1"}
    argv = ["run.toml", "--set", "training.t_max=1", "--set", "ode.samples=256"]

    def risk(out: str) -> tuple[float, bool]:
        done = headflow("ode", *argv, "--out", out, cwd=work, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        meta = json.loads((work / out / "meta.json").read_text())
        return float(np.load(work / out / "ode.npz")["risk"][-1]), "replayed" in meta

    first, replayed = risk("a")
    assert not replayed
    assert risk("b") == (first, True)          # unchanged: replayed
    source = work / "phase_retrieval.py"
    source.write_text(source.read_text().replace("return nu[0] ** 2", "return 2 * nu[0] ** 2"))
    second, replayed = risk("c")
    assert not replayed and abs(second - first) > 0.1


def test_entry_point_and_colliding_package_names(tmp_path):
    """The example package, installed, registers `phase_retrieval` by name; packages called
    `dynamics`, `sims` and `validation` first on the path (as other projects on PyPI are
    named) change nothing."""
    site, source = tmp_path / "site", tmp_path / "plugin"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                           "--no-build-isolation", "--no-index", "--target", str(site),
                           str(source)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    for name in ("dynamics", "sims", "validation"):
        (site / name).mkdir()
        (site / name / "__init__.py").write_text(f"raise ImportError('the other {name}')\n")
    env = {"PYTHONPATH": str(site)}
    done = headflow("models", "--json", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    listing = json.loads(done.stdout.strip().splitlines()[-1])["models"]
    assert {"attention", "committee", "phase_retrieval"} <= set(listing)
    keys = [k["key"] for k in listing["phase_retrieval"]["keys"]]
    assert "model.noise" in keys and "training.lr_params" not in keys
    (tmp_path / "c.toml").write_text('[model]\nkind = "phase_retrieval"\n[training]\n'
                                     'lr = 0.1\nt_max = 1.0\n[ode]\nsamples = 256\n')
    done = headflow("ode", "c.toml", "--out", "o", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "o" / "ode.npz").is_file()


# -- exact expectations of a polynomial model, against closed forms written out here ----------

def closed_form(Q, R, T, eta, sigma):
    """Phase retrieval's drift and risk by Isserlis' theorem (λ, ν jointly Gaussian with
    variances Q, T and covariance R; G = ∂ℓ/∂λ = 2λ(λ² − ν² − σζ)): dQ/dt = E[−2ηGλ + η²G²],
    dR/dt = E[−ηGν], ε = ½E[(λ² − ν²)²]."""
    EGl = 2.0 * (3 * Q**2 - Q * T - 2 * R**2)
    EGn = 2.0 * (3 * Q * R - 3 * R * T)
    EG2 = 4.0 * (15 * Q**3 - 2 * (3 * Q**2 * T + 12 * Q * R**2) + 3 * Q * T**2
                 + 12 * T * R**2 + sigma**2 * Q)
    return -2 * eta * EGl + eta**2 * EG2, -eta * EGn, 0.5 * (3 * Q**2 + 3 * T**2
                                                           - 2 * (Q * T + 2 * R**2))


def test_polynomial_model_is_exact_by_default(PR):
    """A model that declares `polynomial_degree` integrates on Gauss–Hermite rules of
    sufficient order: the drift and the risk equal the closed forms to round-off at generic
    states, and their error estimates are round-off too."""
    from headflow.dynamics.models import model_risk
    from headflow.dynamics.ode import model_field

    cfg = load_config(EXAMPLE / "run.toml", ["model.noise=0.3", "training.lr=0.2"])
    assert cfg.ode.expectation == "exact"
    field = model_field(cfg)
    assert field.nodes.size == 5**3          # order 5 (exact to degree 9 ≥ 6) in 3 dims
    model = cfg.build_model()
    for Q, R, T in ((1.0, 0.0, 1.0), (0.7, 0.3, 1.2), (2.0, -0.9, 1.1)):
        state = GramState(gram=jnp.array([[Q, R], [R, T]]), params={})
        drift, err = field.with_error(state)
        dQ, dR, risk = closed_form(Q, R, T, 0.2, 0.3)
        np.testing.assert_allclose(float(drift.gram[0, 0]), dQ, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(float(drift.gram[0, 1]), dR, rtol=1e-12, atol=1e-13)
        assert float(np.max(np.abs(np.asarray(err.gram)))) < 1e-12
        r, r_err = model_risk(model, state)
        np.testing.assert_allclose(float(r), risk, rtol=1e-13)
        assert abs(float(r_err)) < 1e-12


def test_named_start(PR):
    """`[ode] init` names order parameters; the rest comes from the D → ∞ start; the ODE, the
    SDE's paths and SGD's seeds start there; bad tables are one-line errors."""
    from headflow.dynamics.ode import model_start

    cfg = load_config(EXAMPLE / "run.toml", ["ode.init = {R = [[1e-3]], Q = [[0.5]]}"])
    np.testing.assert_array_equal(np.asarray(model_start(cfg).gram),
                                  np.array([[0.5, 1e-3], [1e-3, 1.0]]))
    bad = {"ode.init = {R = [[2.0]]}": "ode.init: not a valid Gram matrix",
           "ode.init = {X = 1}": "ode.init.X: not an order parameter of this model",
           "ode.init = {R = [1, 2]}": r"ode.init.R: shape \[2\], expected \[1, 1\]",
           "ode.init = {R = [[true]]}": "ode.init.R: entries must be finite numbers",
           "ode.init = 'sideways'": "ode.init = 'sideways': choose one of"}
    from headflow.dynamics import HeadflowError

    for item, msg in bad.items():
        with pytest.raises(HeadflowError, match=msg):
            load_config(EXAMPLE / "run.toml", [item])
    with pytest.raises(ConfigError, match="ode.init: a table of named order parameters is "
                                          "for models of the family"):
        load_config(ROOT / "validation" / "configs" / "demo.toml", ["ode.init = {R = 1}"])


class TanhIndex(AbstractModel):
    """`y = tanh(ν) + σζ`, `ŷ = tanh(λ)`: not a polynomial, increments of moderate tails."""

    kind: ClassVar[str] = "tanh_index_test"
    rows: ClassVar[Rows] = Rows(students=1, teachers=1)
    noise: float = param(0.5)

    def predict(self, params, lam):
        return jnp.tanh(lam[0])

    def target(self, params, nu):
        return jnp.tanh(nu[0])


class CountedIndex(TanhIndex):
    """`TanhIndex` recording the noise of every model whose predictor is traced."""

    kind: ClassVar[str] = "counted_index_test"
    traces: ClassVar[list] = []

    def predict(self, params, lam):
        type(self).traces.append(self.noise)
        return jnp.tanh(lam[0])


class BrokenIndex(TanhIndex):
    kind: ClassVar[str] = "broken_index_test"

    def predict(self, params, lam):
        return jnp.tanh(lam)                        # not a scalar


def test_model_checks_are_remembered_by_value():
    """A model's declarations are checked once per value in a process: configs that differ in
    their training keys only (the points of a grid) do not check their equal models again, a
    model with another value is checked, and a failing check raises every time."""
    CountedIndex.traces.clear()
    CountedIndex(noise=0.25).check()
    once = len(CountedIndex.traces)                 # predict, and the loss through it
    assert once > 0
    for _ in range(2):
        CountedIndex(noise=0.25).check()
    CountedIndex(noise=0.5).check()
    CountedIndex(noise=0.25).check()
    assert CountedIndex.traces == [0.25] * once + [0.5] * once
    for _ in range(2):
        with pytest.raises(ConfigError, match="predict must return a scalar"):
            BrokenIndex().check()


def test_noise_rule_exact_or_sized_by_kurtosis(PR):
    """The diffusion's nodes: the exact Gauss–Hermite rule of the covariance's degree for the
    polynomial model; otherwise Monte Carlo nodes sized from the increments' kurtosis (checked
    against scipy's on the same increments), so that the relative spread of the diffusion's
    scale over node seeds meets the target, where the Gaussian formula's count misses it."""
    import scipy.stats as st

    from headflow.dynamics.sde import ModelDiffusion, noise_rule

    cfg = load_config(EXAMPLE / "run.toml", ["training.lr=0.5"])
    steps = StepSizes(lr=0.5, lr_bias=0.5)
    exact = noise_rule(cfg.build_model(), cfg, steps)
    assert isinstance(exact, Quadrature) and exact.samples == 8**3   # degree 12 ≤ 2·8 − 3

    model, c = TanhIndex(), cfg.replace(**{"ode.expectation": "qmc"})
    rule = noise_rule(model, c, steps)
    assert isinstance(rule, MonteCarlo)
    start = model.limit_state()
    pilot = ModelDiffusion.build(model, steps, MonteCarlo(samples=1 << 14, seed=1))
    U = np.asarray(pilot.increments(start))
    live = U.var(axis=0) > 1e-12 * U.var(axis=0).max()
    kappa = float(np.max(st.kurtosis(U[:, live], axis=0, fisher=False)))
    np.testing.assert_allclose(float(pilot.kurtosis(start)), kappa, rtol=1e-10)
    tau = c.sde.error_target
    gaussian = 2 ** int(np.ceil(np.log2(1 / (2 * tau**2))))
    assert rule.samples == 2 ** int(np.ceil(np.log2((kappa - 1) / (4 * tau**2)))) > gaussian

    def spread(n):                      # relative std over node seeds of the largest scale
        scales = [np.sqrt(np.max(np.sum(np.asarray(ModelDiffusion.build(
            model, steps, MonteCarlo(samples=n, seed=s)).factor(start)) ** 2, axis=1)))
            for s in range(12)]
        return np.std(scales) / np.mean(scales)

    assert spread(rule.samples) < tau < spread(gaussian)


def test_tutorial_shows_the_example_file():
    """The code of `docs/models.md#adding-a-model` is the example's code, line by line in order
    (the docstrings left out), and its config is the example's."""
    text = (ROOT / "docs" / "models.md").read_text()
    section = text[text.index("## Adding a model"):]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    source = (EXAMPLE / "phase_retrieval.py").read_text().splitlines()
    at = 0
    for line in filter(str.strip, code.splitlines()):
        at = source.index(line, at) + 1          # ValueError: a line the example lacks
    toml = section.split("```toml\n", 1)[1].split("```", 1)[0]
    config = [x.split("#")[0].strip() for x in (EXAMPLE / "run.toml").read_text().splitlines()]
    assert [x.split("#")[0].strip() for x in toml.splitlines()] == [x for x in config[1:]]


# -- the fuzzer: broken model files and bad keys, each one line and exit 2 ----------------------

HEADER = ("from typing import ClassVar\nimport jax.numpy as jnp\n"
          "from headflow.dynamics.models import AbstractModel, Rows, SignFlip, param\n")
BODY = {
    "kind": "    kind: ClassVar[str] = 'fuzz'\n",
    "rows": "    rows: ClassVar[Rows] = Rows(students=1, teachers=1)\n",
    "noise": "    noise: float = param(0.0, ge=0)\n",
    "predict": "    def predict(self, params, lam):\n        return lam[0] ** 2\n",
    "target": "    def target(self, params, nu):\n        return nu[0] ** 2\n",
    "degree": "    def polynomial_degree(self):\n        return 2\n",
    "flip": "    def symmetries(self):\n        return (SignFlip(teacher=0),)\n",
}
SPOILED = {
    "rows": ["    rows: ClassVar[Rows] = Rows(students=0, teachers=1)\n",
             "    rows: ClassVar[Rows] = Rows(students='width', teachers=1)\n",
             "    rows: ClassVar[Rows] = Rows(students=1, teachers=1, student_std=-1.0)\n"],
    "noise": ["    noise: float = param()\n", "    noise: float = param(object())\n",
              "    noise: float = param(0.0, ge=1)\n"],
    "predict": ["    def predict(self, params, lam):\n        return lam ** 2\n",
                "    def predict(self, params, lam):\n        return lam[3]\n",
                "    def predict(self, params, lam):\n        return params['v'] * lam[0]\n",
                "    def predict(self, params, lam):\n        return 'x'\n"],
    "target": ["    def target(self, params, nu):\n        return nu @ jnp.ones(5)\n",
               "    def target(self, params, nu):\n        raise RuntimeError('no')\n"],
    "degree": ["    def polynomial_degree(self):\n        return -3\n",
               "    def polynomial_degree(self):\n        return 'two'\n"],
    "flip": ["    def symmetries(self):\n        return (SignFlip(teacher=4),)\n",
             "    def symmetries(self):\n        return (SignFlip(),)\n"],
}
CONFIG_SETS = ["model.noise=-1", "model.noise=\"a\"", "model.width=2", "training.lr=-1",
               "training.lr_params=1", "training.batch=0", "ode.init={R=[[5.0]]}",
               "ode.init={Q=[[1.0, 0.0]]}", "ode.init={v=1}", "ode.init=\"sideways\"",
               "ode.expectation=\"exact\"", "ode.samples=3", "sim.dim=2"]


@st.composite
def model_cases(draw):
    """One defect at most: a part removed or spoiled, bad keys, or a bad kind."""
    parts, sets, kind = dict(BODY), [], "m.py:Fuzz"
    defect = draw(st.sampled_from(["none", "remove", "spoil", "spoil", "keys", "kind"]))
    if defect == "remove":
        del parts[draw(st.sampled_from(sorted(parts)))]
    elif defect == "spoil":
        key = draw(st.sampled_from(sorted(SPOILED)))
        parts[key] = draw(st.sampled_from(SPOILED[key]))
    elif defect == "keys":
        sets = draw(st.lists(st.sampled_from(CONFIG_SETS), min_size=1, max_size=2))
    elif defect == "kind":
        kind = draw(st.sampled_from(["m.py:Nope", "m.py", "x.py:Fuzz", ":Fuzz", "m.py:1Fuzz"]))
    check = draw(st.integers(0, 2)) > 0       # one case in three computes (tiny sizes)
    return (HEADER + "class Fuzz(AbstractModel):\n" + "".join(parts.values()), sets, kind,
            check)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=model_cases())
def test_fuzzed_model_files(tmp_path_factory, capsys, case):
    """A model file with parts missing or spoiled, named by a good or bad kind, with good or bad
    keys: `headflow ode` (mostly with `--check`) either runs it (exit 0) or says why in one line
    (exit 2), never with a traceback, and then leaves no output folder behind."""
    from headflow.validation.cli import main

    source, sets, kind, check = case
    root = tmp_path_factory.mktemp("model")
    (root / "m.py").write_text(source)
    (root / "c.toml").write_text(f'[model]\nkind = "{kind}"\n[training]\nlr = 0.1\n'
                                 't_max = 0.05\n[output]\nn_save = 2\n')
    argv = ["ode", str(root / "c.toml"), "--out", str(root / "deep" / "out"),
            *(["--check"] if check else [])]
    for item in sets:
        argv += ["--set", item]
    try:
        code = main(argv)
    except SystemExit as ex:
        code = ex.code
    captured = capsys.readouterr()
    assert code in (0, 2), (source, sets, kind, captured.err[-2000:])
    assert "Traceback" not in captured.err, (source, captured.err[-2000:])
    if code == 2:
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("headflow: error: "), lines
        assert not (root / "deep").exists()
    else:
        assert check or (root / "deep" / "out" / "ode.npz").is_file()
