"""Jitting a function of models, fields and states by their structure: [`jit_by_structure`][]."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax


def _traced(x: Any) -> bool:
    return eqx.is_array(x) or isinstance(x, float)


def jit_by_structure(fn: Callable) -> Callable:
    """`fn` compiled once per structure of its arguments: arrays and Python floats (learning
    rates, label noise, `ρ*`, prior parameters) are traced, everything else (integers, flags,
    activations, the classes of the pytrees) is part of the program's key.

    Like `equinox.filter_jit`, except that floats are traced rather than compiled in: the
    floats of a model or a field stay weakly typed (as they are in `jnp` arithmetic), so a
    float32 simulation stays float32. Called outside a traced program, a function of a field or
    a model then compiles once per structure and shapes, where run op by op it would compile
    each of its primitives (and a `lax.scan` anew at every call). Called with an argument traced
    by an enclosing transformation (`jit`, `vmap`, `linearize`, a diffrax solve), its jaxpr is
    inlined into that program (`jax.jit(..., inline=True)`: no nested call), and that jaxpr is
    traced once per structure and shapes: a diffrax solve evaluates its vector field at several
    places (the first step size, the solver's first stage, the stages of a step), which then
    run the Python function once. Only for functions that never branch in Python on those
    floats (the vector fields and risks, whose floats the ODE's solve traces as well)."""

    def run(dynamic, treedef, static):
        args, kwargs = eqx.combine(dynamic, jax.tree.unflatten(treedef, static))
        return fn(*args, **kwargs)

    run.__name__, run.__qualname__ = fn.__name__, fn.__qualname__    # the program's name
    inlined = jax.jit(run, static_argnums=(1, 2), inline=True)
    run = jax.jit(run, static_argnums=(1, 2))

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        dynamic, static = eqx.partition((args, kwargs), _traced)
        leaves, treedef = jax.tree.flatten(static)
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(dynamic)):
            return inlined(dynamic, treedef, tuple(leaves))
        return run(dynamic, treedef, tuple(leaves))

    return wrapper
