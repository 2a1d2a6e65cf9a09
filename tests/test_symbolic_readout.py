"""The symbolic derivation of readout models (`dynamics/symbolic/_readout.py`): the system sympy
derives from the committee's predictor, evaluated with the unit's closed-form integrals, equals
the engine's exact field and the Saad–Solla equations written out independently to round-off,
and has their structure."""

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
    (3, 2, "linear", 0.2, True), (3, 3, "erf", 0.1, True)])
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


@pytest.mark.parametrize("K, M, unit, sigma, both", [
    (2, 1, "erf", 0.4, True), (3, 2, "erf", 0.0, False), (2, 2, "linear", 0.3, True)])
def test_derived_rhs_equals_the_saad_solla_loops(K, M, unit, sigma, both):
    """The derived system against the Saad–Solla equations written out independently
    (`test_committee_exact.ref_rhs`: loops over units, the integrals' closed forms coded in that
    file): `dQ` with its η² terms and the label noise's `σ² J2`, `dR` and `dv`, to 1e-13 of
    the largest entry, at a random state with second layers away from 1."""
    from test_committee_exact import ref_rhs

    model = Committee(K=K, M=M, unit=get_unit(unit), noise=sigma, train_second_layer=both,
                      init_first_std=0.9)
    st = model.initial_state(jax.random.key(7 * K + M), 2 * (K + M))
    v, A = np.linspace(0.5, 1.4, K), np.linspace(1.2, 0.7, M)
    st = GramState(gram=st.gram, params={"v": jnp.asarray(v), "A": jnp.asarray(A)})
    eta, eta_v = 0.9, 0.4
    derived = readout_rhs(model, eta, eta_v, st)
    g = np.asarray(st.gram)
    dQ, dR, dv = ref_rhs(g[:K, :K], g[:K, K:], g[K:, K:], v, A, eta=eta, eta_v=eta_v,
                         sigma=sigma, train=both, unit=unit)
    got = np.asarray(derived.gram)
    scale = np.max(np.abs(dQ))
    np.testing.assert_allclose(got[:K, :K], dQ, rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(got[:K, K:], dR, rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(np.asarray(derived.params["v"]), dv, rtol=0, atol=1e-13 * scale)
    # the η² terms are a visible part of dQ here (the check covers them)
    no_noise, _, _ = ref_rhs(g[:K, :K], g[:K, K:], g[K:, K:], v, A, eta=eta, eta_v=eta_v,
                             sigma=sigma, train=both, unit=unit, noise=False)
    assert np.max(np.abs(dQ - no_noise)) > 1e-3 * scale


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
