"""The least a JAX program pays end to end, for `bench_committee.py`: a fresh process that
imports JAX and diffrax and runs one jitted diffrax solve (Tsit5, PID controller, 101 saves)
of a one-line ODE, with JAX's persistent compilation cache in `CACHE` (the first call fills
it; later calls read the compiled program back, as a warm `headflow` command does). It shares
no code with headflow: whatever `headflow ode` or `headflow sweep` does on top of this floor
(the model, the configuration, the figures) can only add to it.

    python benchmarks/_jax_floor.py CACHE
"""

from __future__ import annotations

import sys


def main() -> None:
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    import diffrax as dfx
    import jax.numpy as jnp

    def f(t, y, args):
        return -y

    @jax.jit
    def solve(y0):
        sol = dfx.diffeqsolve(dfx.ODETerm(f), dfx.Tsit5(), 0.0, 1000.0, None, y0,
                              stepsize_controller=dfx.PIDController(rtol=1e-6, atol=1e-8),
                              saveat=dfx.SaveAt(ts=jnp.linspace(0.0, 1000.0, 101)),
                              max_steps=100_000)
        return sol.ys

    print(float(solve(jnp.ones(1))[-1, 0]))


if __name__ == "__main__":
    main()
