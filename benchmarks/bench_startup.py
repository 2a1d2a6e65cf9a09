"""Benchmark of the start-up time: `headflow --help` imports nothing heavy before printing.

Times, in fresh interpreters and in one run (median of `--repeat` runs each):

1. `python -m headflow.validation --help` (target: under 0.5 s on an idle 2-core machine);
2. `python -m headflow.validation ode --help` (same target);
3. `python -m headflow.validation ode validation/configs/demo.toml --set training.t_max=20` repeated
   with a warm cache (a private cache folder, filled by one untimed run first; target: under
   3 s end to end);
4. `python -c "import jax"`, the baseline: what every `--help` paid before.

and prints the ratios of 1–3 to 4, so that a busy machine (which slows them all alike) still
gives a meaningful comparison.

Usage: `python benchmarks/bench_startup.py [--repeat 5]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "headflow --help": [sys.executable, "-m", "headflow.validation", "--help"],
    "headflow ode --help": [sys.executable, "-m", "headflow.validation", "ode", "--help"],
    "headflow ode, warm cache": [sys.executable, "-m", "headflow.validation", "ode",
                                 "validation/configs/demo.toml", "--set", "training.t_max=20",
                                 "--out", "{out}", "--force"],
    "import jax (baseline)": [sys.executable, "-c", "import jax"],
}


TARGETS = {"headflow --help": 0.5, "headflow ode --help": 0.5, "headflow ode, warm cache": 3.0}
"""Seconds, on an idle 2-core machine."""


def wall_time(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (median; default 5)")
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="bench-startup-")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "HEADFLOW_CACHE_DIR": str(Path(tmp.name) / "cache"), "HEADFLOW_CACHE": "1"}
    medians = {}
    for name, template in CASES.items():
        cmd = [a.replace("{out}", str(Path(tmp.name) / "out")) for a in template]
        wall_time(cmd, env)             # warm the file-system cache (and fill headflow's)
        times = [wall_time(cmd, env) for _ in range(args.repeat)]
        medians[name] = statistics.median(times)
        print(f"{name:26s} median {medians[name]:.3f} s  (min {min(times):.3f}, max "
              f"{max(times):.3f}, {args.repeat} runs)", flush=True)
    base = medians["import jax (baseline)"]
    for name, target in TARGETS.items():
        print(f"{name:26s} / import jax = {medians[name] / base:.3f}  (target: under {target:g} "
              f"s on an idle 2-core machine: {'met' if medians[name] < target else 'NOT met'} "
              "here)")
    tmp.cleanup()


if __name__ == "__main__":
    main()
