"""The ODE's solve loaded from its exported program against traced, in fresh processes with
JAX's compilation cache warm (`headflow.dynamics.set_export_cache`).

For each model (the demo's attention config at t = 1, a K = M = 2 erf committee at t = 10) and
each way, three fresh processes with another learning rate each (the first fills the caches);
each prints the wall seconds of `headflow.dynamics.ode.integrate` (the problem built; tracing or
loading, compiling or reading back, and the solve):

- `traced`: the export cache off, as before it existed: the solve traced and lowered in every
  process, its compilation read back from JAX's cache;
- `exported`: the export cache on, as the command line runs (`EQX_ON_ERROR=nan`): the first
  process exports and stores the solve, the others load it;
- `exported, EQX_ON_ERROR=raise`: equinox's checks as host callbacks, which `jax.export`
  refuses: the solve is traced every time (and JAX's cache does not keep it either).

    python benchmarks/bench_export.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"attention": (str(ROOT / "validation" / "configs" / "demo.toml"),
                         ["training.t_max=1"]),
           "committee": (None, ['model.kind="committee"', "training.t_max=10"])}
WAYS = {"traced": {"EQX_ON_ERROR": "nan"}, "exported": {"EQX_ON_ERROR": "nan"},
        "exported, EQX_ON_ERROR=raise": {"EQX_ON_ERROR": "raise"}}


def child(kind: str, way: str, lr: float, cache: Path) -> None:
    import jax

    jax.config.update("jax_enable_x64", True)
    import headflow.dynamics as d
    from headflow.dynamics.ode import build, integrate

    d.set_export_cache(None if way == "traced" else cache / "exported")
    path, sets = CONFIGS[kind]
    problem = build(d.load_config(path, [*sets, f"training.lr={lr}"]))
    t0 = time.perf_counter()
    sol = integrate(problem.field, problem.start, problem.times, problem.integrator)
    wall = time.perf_counter() - t0
    print(f"{kind}, {way}, η = {lr}: {wall:.2f} s ({sol.compile_s:.2f} s to the compiled "
          f"program, {sol.num_steps} steps)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", nargs=4, metavar=("KIND", "WAY", "LR", "CACHE"))
    a = p.parse_args()
    if a.child:
        kind, way, lr, cache = a.child
        child(kind, way, float(lr), Path(cache))
        return
    for kind in CONFIGS:
        for way, env in WAYS.items():
            with tempfile.TemporaryDirectory() as cache:
                jax_cache = {"JAX_COMPILATION_CACHE_DIR": str(Path(cache) / "jax"),
                             "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                             "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
                for lr in (0.5, 0.6, 0.7):
                    done = subprocess.run([sys.executable, __file__, "--child", kind, way,
                                           str(lr), cache],
                                          env={**os.environ, **jax_cache, **env},
                                          capture_output=True, text=True, timeout=900)
                    lines = (done.stdout.strip() or done.stderr.strip()).splitlines()
                    print(lines[-1] if lines else done.returncode, flush=True)


if __name__ == "__main__":
    main()
