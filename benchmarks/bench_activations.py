"""Full-size results of issue 7 (activations, Bayes-optimality, pruning): the exact commands whose
numbers `docs/activations.md` quotes, run one after the other, with their key numbers printed.

    python benchmarks/bench_activations.py OUT_ROOT [--only sweep,eta_heads,prune,prune_sgd]

Each study is one `headflow` command (a result folder under OUT_ROOT). On 2 shared CPU cores the
whole set takes a few hours (the amplitude sweep alone ~75 min): softmax-1 states creep for a long
time (see the docs).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ODE = ["--set", "ode.samples=4096", "--set", "ode.expectation=qmc", "--set", "ode.rtol=1e-5",
       "--set", "ode.atol=1e-7"]

STUDIES = {
    # final risk vs signal, three activations, flipped spike (p = 0.7, L = 4, H = 2), with SGD
    "sweep": ["activations", *ODE, "--amplitudes", "1,2,3,4", "--t-max", "4000",
              "--sgd-amplitudes", "2,3", "--sgd-dim", "2000", "--sgd-seeds", "4",
              "--sgd-t", "200"],
    # Bayes-softmax: gradient flow vs R_Bayes, SGD-noise excess vs η (ODE and SGD at D = 2000),
    # and risk vs H for the three activations, at a = 3
    "eta_heads": ["activations", *ODE, "--amplitudes", "3", "--t-max", "2000",
                  "--etas", "0.125,0.25,0.5,1", "--sgd-etas", "0.25,0.5,1", "--sgd-tau", "100",
                  "--tau-max", "1000", "--heads", "1,2,3,4"],
    # SGD points against the ODE with the same SGD noise (same η, same window)
    "sgd_vs_noise": ["activations", *ODE, "--amplitudes", "2,3", "--t-max", "200",
                     "--sgd-amplitudes", "2,3", "--sgd-dim", "2000", "--sgd-seeds", "4",
                     "--sgd-t", "200"],
    # pruning 4 trained heads (long-time gradient-flow states), flipped spike a = 3
    "prune": ["prune", *ODE, "--set", "model.H=4", "--t-max", "1000", "--random-orders", "8"],
    # pruning SGD weights (D = 2000, 4 seeds, t = 200; η = 0.5: four softmax heads diverge at 1)
    "prune_sgd": ["prune", "--set", "model.H=4", "--set", "training.lr=0.5", "--set",
                  "training.lr_bias=0.5", "--set", "training.t_max=200", "--source", "sgd",
                  "--dim", "2000", "--seeds", "4", "--random-orders", "8"],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--only", default=",".join(STUDIES))
    args = ap.parse_args()
    exe = [sys.executable, "-m", "headflow.validation.cli"]
    for name in args.only.split(","):
        cmd = exe + STUDIES[name] + ["--out", str(args.root / name), "--json"]
        print("$ headflow " + " ".join(STUDIES[name]) + f" --out {args.root / name} --json",
              flush=True)
        t = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if res.returncode != 0:
            print(res.stderr, file=sys.stderr)
            return res.returncode
        print(res.stdout.rstrip().rsplit("\n", 1)[0])
        summary = json.loads(res.stdout.strip().splitlines()[-1])
        print(f"[{name}: {wall:.0f} s wall; summary in {summary['out']}]\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
