"""The symbolic derivation of readout models (`dynamics/symbolic/_readout.py`): the system sympy
derives from the committee's predictor, evaluated with the unit's closed-form integrals, equals
the engine's exact field to round-off, and has the structure of the Saad–Solla ODEs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp

from headflow.dynamics import StepSizes
from headflow.dynamics.fields import ExactField
from headflow.dynamics.models import Committee, GramState
from headflow.dynamics.symbolic import readout_ode, readout_rhs
from headflow.dynamics.symbolic._readout import I2, I3
from headflow.dynamics.units import get_unit


@pytest.mark.parametrize("K, M, unit, sigma, both", [
    (1, 1, "erf", 0.0, True), (2, 1, "erf", 0.3, False), (2, 3, "erf", 0.5, True),
    (3, 2, "linear", 0.2, True), (4, 4, "erf", 0.1, True)])
def test_derived_rhs_equals_exact_field(K, M, unit, sigma, both):
    model = Committee(K=K, M=M, unit=get_unit(unit), noise=sigma, train_second_layer=both,
                      init_first_std=0.7)
    st = model.initial_state(jax.random.key(K + 10 * M), 3 * (K + M))
    st = GramState(gram=st.gram, params={"v": jnp.linspace(0.4, 1.3, K),
                                         "A": jnp.linspace(1.1, 0.6, M)})
    exact = jax.jit(lambda s: ExactField.build(model, StepSizes(lr=0.8, lr_bias=0.3))(0.0, s))(st)
    derived = readout_rhs(model, 0.8, 0.3, st)
    scale = float(jnp.max(jnp.abs(exact.gram)))
    assert float(jnp.max(jnp.abs(derived.gram - exact.gram))) <= 1e-13 * scale
    np.testing.assert_allclose(derived.params["v"], exact.params["v"], rtol=0, atol=1e-14)
    np.testing.assert_array_equal(derived.params["A"], 0.0)


def test_structure_is_saad_solla():
    """`dR_in/dt = −η c_i Σ_a w_a I3(i, n, a)` and `dc_i/dt = −η_c Σ_a w_a I2(i, a)` with
    `w = (c, −c*)`: exactly what sympy derives (K = 2, M = 1)."""
    ode = readout_ode(2, 1)
    s = ode.symbols
    c, cs, eta, eta_c = s["c"], s["cs"], s["eta"], s["eta_c"]
    w = [c[0], c[1], -cs[0]]
    want_r = -eta * c[0] * sum(w[a] * I3(1, 3, a + 1) for a in range(3))
    want_c = -eta_c * sum(w[a] * I2(*sorted((1, a + 1))) for a in range(3))
    assert sp.expand(ode.dR[0][0] - want_r) == 0
    assert sp.expand(ode.dc[0] - want_c) == 0
