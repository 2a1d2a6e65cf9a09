"""Full-size escape-time measurement (`docs/phases.md#the-papers-claims`): the `headflow escape`
study of
`validation/configs/escape.toml` over D = 250, 500, 1000, 2000, 4000 with 16 seeds, compile
time reported separately from run time.

    .venv/bin/python benchmarks/bench_escape.py [--dims 250,500,1000,2000,4000] [--seeds 16]
        [--out runs/bench-escape]

Writes the result files of `headflow escape` (escape.json, escape.npz, escape.png, with
config.toml and a meta.json of the timings) into the folder `--out`, and prints λ, the predicted
slope, the measured slope with its 95% interval and the timings: `compile_s` (a warm-up pass
with the same shapes and a vanishing horizon: jit compilation of the SGD segments and of the
tangent-linear solve), then `sgd_s` and `theory_s` of the real pass.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import time
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np


def _jsonable(obj: Any) -> Any:
    """`obj` with numpy scalars and arrays as Python numbers and lists, tuples as lists, and
    every non-finite float as None (strict JSON has no NaN or infinity)."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "__array__"):          # numpy and jax arrays and scalars
        return _jsonable(np.asarray(obj).tolist())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    return obj


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(_jsonable(obj), indent=2, allow_nan=False) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="250,500,1000,2000,4000")
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--out", type=Path, default=Path("runs/bench-escape"))
    args = ap.parse_args()

    import jax

    jax.config.update("jax_enable_x64", True)
    from headflow.dynamics import Config
    from headflow.validation.experiments import escape as esc
    from headflow.validation.plots.phases import plot_escape

    text = resources.files("headflow.validation").joinpath("configs/escape.toml").read_text()
    cfg = Config.from_dict(tomllib.loads(text)).replace(**{"sim.seeds": args.seeds})
    dims = [int(d) for d in args.dims.split(",")]

    t0 = time.perf_counter()
    esc.sgd_escape_times(cfg, dims, args.seeds, t_max=1e-6)
    esc.linear_theory(cfg, t_max=1e-3)
    compile_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    report, arrays = esc.escape_study(cfg, dims, args.seeds)
    run_s = time.perf_counter() - t0
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.toml").write_text(cfg.to_toml())
    _write_json(out / "escape.json", report)
    np.savez(out / "escape.npz", **arrays)
    plot_escape(out / "escape.png", report, arrays)
    _write_json(out / "meta.json", {
        "command": "bench_escape", "dims": dims, "seeds": args.seeds,
        "jax": jax.__version__, "devices": [str(d) for d in jax.devices()],
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "timings": {"compile_s": compile_s, "run_s": run_s, **report["wall_s"]}})
    print(json.dumps({k: report[k] for k in ("lambda", "slope_predicted", "slope_measured",
                                             "slope_ci", "escape_mean", "escape_predicted",
                                             "censored")}, indent=2))
    print(json.dumps({"compile_s": round(compile_s, 1), "run_s": round(run_s, 1),
                      "sgd_s": round(report["wall_s"]["sgd"], 1),
                      "theory_s": round(report["wall_s"]["linear_theory"], 1)}))
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
