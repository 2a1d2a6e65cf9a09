"""`headflow.dynamics._jit.jit_by_structure`: one compiled program per structure, with the Python
floats of models and fields traced (weakly typed) rather than compiled in; and
`headflow.dynamics.sharding.map_batched`, a batched map whose function is traced once."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from headflow.dynamics._jit import jit_by_structure


class _Model(eqx.Module):
    scale: float
    power: int
    name: str = eqx.field(static=True, default="a")


def test_floats_are_traced_and_the_rest_keys_the_program():
    traces = []

    @jit_by_structure
    def f(model, x, *, shift=0.0):
        traces.append(model.power)
        return model.scale * x**model.power + shift

    x = jnp.arange(3.0, dtype=jnp.float32)
    a = f(_Model(0.5, 2), x, shift=0.0)
    b = f(_Model(-1.5, 2), x, shift=2.0)             # other floats: the same program
    assert len(traces) == 1
    # the floats stay weakly typed: a float32 argument gives float32 (x64 is on in tests)
    assert a.dtype == b.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(a), 0.5 * np.arange(3.0) ** 2)
    np.testing.assert_allclose(np.asarray(b), -1.5 * np.arange(3.0) ** 2 + 2.0)
    f(_Model(0.5, 3), x, shift=0.0)                   # another int: another program
    f(_Model(0.5, 2, name="b"), x, shift=0.0)        # another static field: another program
    f(_Model(0.5, 2), jnp.arange(4.0, dtype=jnp.float32), shift=0.0)   # another shape
    f(_Model(0.5, 2), x)               # another call signature (no keyword): another program
    assert len(traces) == 5
    f(_Model(2.0, 3), x, shift=1.0)                   # back to a known structure
    assert len(traces) == 5


def test_inside_a_traced_program_it_is_inlined_and_traced_once():
    """Called on traced arguments (here under `jax.jit` and `jax.linearize`), the function's
    jaxpr is inlined into the enclosing program: no nested jitted call appears in its jaxpr. The
    function is traced once per structure: called again inside enclosing programs, with other
    floats, its cached jaxpr is inlined without running the Python function again (and the
    program it compiles to outside any trace starts from the same jaxpr)."""
    traces = []

    def g(model, x):
        traces.append(model.power)
        return model.scale * jnp.sin(x) ** model.power

    f = jit_by_structure(g)
    x = jnp.linspace(0.0, 1.0, 4)
    jaxpr = jax.make_jaxpr(lambda x: jax.linearize(lambda y: f(_Model(0.5, 2), y), x)[1](x))(x)
    names = {eqn.primitive.name for eqn in jaxpr.jaxpr.eqns}
    assert "sin" in names and not names & {"pjit", "jit"}, names
    assert len(traces) == 1
    both = jax.jit(lambda x: f(_Model(0.5, 2), x) + f(_Model(-1.0, 2), 2 * x))(x)
    assert len(traces) == 1                            # the same structure: not traced again
    np.testing.assert_allclose(np.asarray(both), 0.5 * np.sin(np.linspace(0, 1, 4)) ** 2
                               - np.sin(2 * np.linspace(0, 1, 4)) ** 2, rtol=1e-14)
    eager = f(_Model(0.5, 2), x)      # outside: its own program, from the same trace
    np.testing.assert_allclose(np.asarray(eager), 0.5 * np.sin(np.linspace(0, 1, 4)) ** 2,
                               rtol=1e-14)
    jax.make_jaxpr(lambda x: f(_Model(0.5, 3), x))(x)  # another int: another structure
    assert traces == [2, 3]


def test_map_batched_traces_once_and_equals_the_map():
    """`map_batched` gives `vmap`'s results for any length (below, at and above the batch, a
    multiple or not) and traces the function once, where `lax.map` traces it again for the
    remainder."""
    from headflow.dynamics.sharding import map_batched

    traces = []

    def f(x):
        traces.append(x.shape)
        return {"a": jnp.sin(x[0]) * x[1], "b": 2.0 * x}

    for n in (3, 8, 13, 16):
        xs = jnp.arange(2.0 * n).reshape(n, 2) / n
        traces.clear()
        got = jax.jit(lambda xs: map_batched(f, xs, 8))(xs)
        assert len(traces) == 1, (n, traces)
        want = jax.vmap(f)(xs)
        for k in want:
            assert got[k].shape == want[k].shape
            np.testing.assert_allclose(np.asarray(got[k]), np.asarray(want[k]), rtol=1e-15)
    traces.clear()
    jax.jit(lambda xs: jax.lax.map(f, xs, batch_size=8))(jnp.ones((13, 2)))
    assert len(traces) == 2
