"""The escape is read from an observable the model declares
(`AbstractModel.escape_observable`): the spread between the student units when there are two or
more (the committee: unchanged), the alignment `|R|/√(QT)` of the student with its best teacher
when there is one. A one-student model, phase retrieval (teacher `y = ν²`, student `ŷ = λ²`, one
student and one teacher row), is defined and registered here; its paths leave `α ≈ D^{-1/2}`
for `α ≈ 1`, and every report of escapes (SDE, compare, phases) now sees it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float, Scalar

from headflow.dynamics import Layout
from headflow.dynamics.config import Config
from headflow.dynamics.measures import (ESCAPE_THRESHOLD, escape_crossing, escape_quantiles,
                                        escape_time, head_spread)
from headflow.dynamics.models import (AbstractModel, GramState, Rows, param, register_model,
                                      unregister_model)
from headflow.dynamics.sde import run_sde
from headflow.validation.experiments.compare import escapes_of
from headflow.validation.experiments.phases import layout_phases

KIND = "phase_retrieval_escape_test"


class PhaseRetrieval(AbstractModel):
    """Teacher `y = ν²`, student `ŷ = λ²`, loss `½(ŷ − y)²`; one student and one teacher row,
    no scalar parameters."""

    kind: ClassVar[str] = KIND
    rows: ClassVar[Rows] = Rows(students=1, teachers=1, student_std="init_std")
    layout: ClassVar[Layout] = Layout(names=("Q", "R"), per_unit=("R",), unit_by_unit=("Q",),
                                      alignment=("R", "Q"))
    t_max: ClassVar[float] = 10.0

    init_std: Any = param(1.0, section="training", ge=0)

    def predict(self, params: Mapping[str, Array], lam: Float[Array, " 1"]) -> Scalar:
        del params
        return lam[0] ** 2

    def target(self, params: Mapping[str, Array], lam_star: Float[Array, " 1"]) -> Scalar:
        del params
        return lam_star[0] ** 2


@pytest.fixture(scope="module")
def registered():
    register_model(PhaseRetrieval)
    yield
    unregister_model(KIND)


def _state(Q, R, T) -> GramState:
    """A batch of one-student states with the given `Q`, `R`, `T` (arrays of one shape)."""
    Q, R, T = (np.asarray(x, dtype=np.float64) for x in (Q, R, T))
    gram = np.stack([np.stack([Q, R], -1), np.stack([R, T], -1)], -2)
    return GramState(gram=jnp.asarray(gram), params={})


def _alignment(Q, R, T) -> np.ndarray:
    return np.abs(R) / np.sqrt(np.asarray(Q) * np.asarray(T))


# -- (a) the default observable --------------------------------------------------------------------

def test_one_student_observable_is_the_alignment(registered):
    """One student: `|R|/√(QT)` on states with `Q, T ≠ 1` and either sign of `R` (batch axes
    kept), for the named view and for numpy arrays of it (as read from an output file)."""
    model = PhaseRetrieval()
    Q = np.array([[2.0, 0.5], [1.0, 3.0]])
    R = np.array([[-0.7, 0.1], [0.0, 1.2]])
    T = np.array([[0.5, 1.5], [1.0, 0.9]])
    named = model.named(_state(Q, R, T))
    got = np.asarray(model.escape_observable(named))
    assert got.shape == (2, 2)
    np.testing.assert_allclose(got, _alignment(Q, R, T), rtol=1e-14)
    arrays = {k: np.asarray(v) for k, v in named.items()}
    np.testing.assert_allclose(model.escape_observable(arrays), _alignment(Q, R, T), rtol=1e-14)


def test_committee_observable_is_the_spread():
    """Two students or more (the committee): the head spread of `(R, Q)`, bitwise."""
    model = Config.from_toml('[model]\nkind = "committee"\nK = 3\nM = 2').build_model()
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 5, 40))                       # (batch, K + M, D)
    gram = np.einsum("bpd,bqd->bpq", w, w) / 40
    params = {k: jnp.broadcast_to(v, (4, *v.shape)) for k, v in model.limit_state().params.items()}
    state = GramState(gram=jnp.asarray(gram), params=params)
    named = {k: np.asarray(v) for k, v in model.named(state).items()}
    got = np.asarray(model.escape_observable(named))
    want = head_spread(named["R"], named["Q"])
    assert got.shape == (4,) and np.all(want > 0)
    np.testing.assert_array_equal(got, want)


# -- (b) the escape time of a synthetic trajectory ------------------------------------------------

def test_escape_time_of_a_synthetic_alignment(registered):
    """A run whose alignment rises linearly through θ = 0.2 at t = 3 (`Q = 2`, `T = 0.5`,
    `R < 0`): the escape time is 3 in the reports (compare's `escapes_of`, the plateau exit of
    `phases`); the spread rule, one unit having no spread, found none."""
    model = PhaseRetrieval()
    t = np.linspace(0.0, 10.0, 41)
    alpha = 0.05 + 0.05 * t                                    # 0.2 at t = 3
    Q, T = np.full_like(t, 2.0), np.full_like(t, 0.5)
    R = -alpha * np.sqrt(Q * T)
    arrays = {k: np.asarray(v)[None] for k, v in model.named(_state(Q, R, T)).items()}
    (esc,) = escapes_of(t, arrays, model.layout, observable=model.escape_observable)
    assert esc == pytest.approx(3.0, abs=1e-12)
    one = {k: v[0] for k, v in arrays.items()}
    ph = layout_phases(t, one, model.layout, threshold=ESCAPE_THRESHOLD,
                       observable=model.escape_observable)
    assert ph.plateau_exit == pytest.approx(3.0, abs=1e-12)
    assert escape_time(t, one["R"], one["Q"]) is None           # the spread rule: never
    # a run that stays below θ does not escape
    flat = {k: np.asarray(v)[None] for k, v in
            model.named(_state(Q, -0.15 * np.sqrt(Q * T), T)).items()}
    assert escapes_of(t, flat, model.layout, observable=model.escape_observable) == [None]


# -- (c) an SDE ensemble of the one-student model ------------------------------------------------

TOML = f"""
[model]
kind = "{KIND}"

[training]
lr = 0.1
t_max = 12.0

[ode]
expectation = "qmc"

[sde]
paths = 8
dt = 0.1
samples_noise = 256
samples_drift = 1024

[sim]
dim = 100
risk_samples = 256

[output]
n_save = 25
"""


def test_sde_one_student_reports_escapes(registered):
    """A short SDE ensemble at D = 100 (8 paths, t ≤ 12): the paths start at alignment ~0.1
    and most escape (above 0.5 at the end; the law's escape times have a tail beyond t = 12,
    so not every path), and `SDEResult.escape_times` (what `headflow sde` writes and reports)
    finds each crossing, with finite quantiles; the spread rule reported no escape at all on
    the same paths."""
    cfg = Config.from_toml(TOML)
    res = run_sde(cfg)
    arrays = res.arrays()
    alpha = _alignment(arrays["Q"][..., 0, 0], arrays["R"][..., 0, 0], arrays["T"][..., 0, 0])
    assert np.all(alpha[:, 0] < 0.5) and np.sum(alpha[:, -1] > 0.5) >= 6, alpha[:, [0, -1]]
    esc = res.escape_times()
    assert np.isfinite(esc).sum() >= 6, esc
    q = escape_quantiles(esc)
    assert all(np.isfinite(q[k]) for k in ("0.1", "0.25", "0.5", "0.75")), q
    want = [escape_crossing(arrays["t"], a) for a in alpha]
    np.testing.assert_allclose(esc, np.array(want, dtype=float), rtol=1e-12)
    old = [escape_time(arrays["t"], arrays["R"][i], arrays["Q"][i]) for i in range(len(esc))]
    assert old == [None] * len(esc)
