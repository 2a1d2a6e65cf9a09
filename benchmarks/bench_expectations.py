"""Field error against nodes and against wall time, for the node constructions of the ODE's
Gaussian expectations (`docs/ode.md#nodes`). Prints, for each config:

- `heads`: nodes closed under the head permutations only (the construction that does not know
  the prior), with θ joined into the signal token for a Gaussian prior;
- `theta-nodes` (Gaussian priors only): as `heads`, but θ drawn from its own node coordinates
  (a prior that does not join the signal token: the construction before θ was joined);
- `model`: nodes closed under the model's group (heads × the prior's feature group), the
  default.

The error is the root mean square, over the entries of `d(overlaps)/dt` and `--seeds`
scramblings, of the difference from a `--reference`-node `model` field, at two states: the
config's start and a random state with overlaps of order one. The time is one evaluation of
the jitted field (median of 5, compile excluded). `leak` is the largest component of the field
that leaves the subspace the prior's feature group fixes (zero overlap with the sign-symmetric
features, equal overlaps with exchangeable ones), relative to the field's largest entry, at a
random state on that subspace (worst over the seeds): the exact field has none. The last
lines give the ratio of node counts (and of times) that `heads` needs for the error `model`
reaches, interpolated log-log.

Usage: `python benchmarks/bench_expectations.py [--configs demo,stages_mean,activations_onehot]
[--samples 256,1024,4096] [--seeds 4] [--reference 65536]`.

`--rules` compares the integration rules instead, on the model's closed nodes: `qmc` (over
`--seeds` scramblings) against `sparse` (`docs/ode.md#sparse-grids`), at the config's start and
at the state its ODE reaches at `--t-long` (run on 16384 QMC nodes): where the softmax has
sharpened, which is where the open verdicts live. The errors are the rms differences of the
field from two references, the sparse grid of the highest level within `--reference` nodes
and QMC on `--reference` nodes; their distance from each other says which one is resolved.
Usage: `python benchmarks/bench_expectations.py --rules --configs activations_spike
--set prior.amplitude=4 --set model.activation=bayes_softmax --t-long 200`.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import headflow.dynamics as d
from headflow.dynamics.expectations import QuasiMonteCarlo, SparseGrid
from headflow.dynamics.models.attention import key_nodes
from headflow.dynamics.ode import build_field, initial_state, run_ode
from headflow.dynamics.priors import Gaussian

jax.config.update("jax_enable_x64", True)

CONFIGS = Path(__file__).resolve().parent.parent / "validation" / "configs"


class SeparateTheta(Gaussian):
    """The same Gaussian prior with θ on its own node coordinates (not joined into the signal
    token's law), as a prior that only provides `theta_nodes` is treated."""

    @property
    def n_node_dims(self) -> int:
        return self.F

    def signal_theta(self, normals, g_signal):
        thetas, weights = self.theta_nodes(normals[None, :])
        return thetas[:, 0, :], weights


def random_state(key, H: int, F: int) -> d.Overlaps:
    k = jr.split(key, 5)
    m = 0.6 * jr.normal(k[0], (H, F))
    A = jr.normal(k[1], (H, H)) / np.sqrt(H)
    n = 0.5 * jr.normal(k[2], (H,))
    C = jr.normal(k[3], (H, H)) / np.sqrt(H)
    return d.Overlaps.manifold(m, m @ m.T + 0.4 * A @ A.T + 0.05 * jnp.eye(H), n,
                               jnp.outer(n, n) + 0.4 * C @ C.T + 0.05 * jnp.eye(H),
                               0.3 * jr.normal(k[4], (H,)))


def invariant_state(key, H: int, sym) -> d.Overlaps:
    """A random state on the subspace the feature group fixes: zero overlap with every
    sign-symmetric feature, equal overlaps with the features of one class."""
    ov = random_state(key, H, sym.F)
    m = ov.m.at[:, list(sym.flips)].set(0.0)
    for cls in sym.classes:
        m = m.at[:, list(cls)].set(m[:, cls[:1]])
    return d.Overlaps.manifold(m, m @ m.T + ov.r, ov.n, ov.s, ov.b)


def leak(dv: d.Overlaps, sym) -> float:
    """The largest component of `dv` leaving the subspace of [`invariant_state`][], relative
    to the largest entry of `dv`."""
    m = np.asarray(dv.m)
    parts = [np.abs(m[:, list(sym.flips)]).ravel()]
    parts += [np.abs(m[:, list(c)] - m[:, c[:1]]).ravel() for c in sym.classes]
    scale = max(float(np.max(np.abs(np.asarray(x)))) for x in jax.tree.leaves(dv))
    return float(np.max(np.concatenate(parts))) / scale


def flat(ov) -> np.ndarray:
    return np.concatenate([np.asarray(getattr(ov, k)).ravel() for k in ("m", "q", "n", "s",
                                                                         "b")])


@eqx.filter_jit
def evaluate(field, states):
    return jax.vmap(lambda o: field(0.0, o))(states)


def timed(field, states) -> float:
    jax.block_until_ready(evaluate(field, states))
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        jax.block_until_ready(evaluate(field, states))
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) / states.b.shape[0]


def variants(model) -> dict[str, tuple]:
    """`name -> (model, features)` of the constructions compared."""
    out = {"heads": (model, False)}
    if isinstance(model.prior, Gaussian):
        sep = SeparateTheta(model.prior.mu, model.prior.var)
        out = {"theta-nodes": (dataclasses.replace(model, prior=sep), False), **out}
    out["model"] = (model, True)
    return out


def run_config(name: str, samples: list[int], seeds: int, reference: int) -> None:
    cfg = d.load_config(CONFIGS / f"{name}.toml").replace(**{"ode.expectation": "qmc"})
    model = cfg.build_model()
    base = build_field(cfg, model)
    start = initial_state(cfg, model).on_manifold()
    sym = model.prior.symmetry()
    states = jax.tree.map(lambda a, b: jnp.stack([a, b]), start,
                          random_state(jr.key(0), model.H, model.F))
    on_subspace = jax.tree.map(lambda a: a[None], invariant_state(jr.key(1), model.H, sym))
    ref_nodes = key_nodes(model, QuasiMonteCarlo(samples=reference, seed=12345))
    ref = evaluate(eqx.tree_at(lambda f: f.nodes, base, ref_nodes), states)
    ref_flat = np.stack([flat(jax.tree.map(lambda x: x[i], ref)) for i in range(2)])
    print(f"\n== {name}: H={model.H} F={model.F} L={model.L} {type(model.prior).__name__} "
          f"{model.activation.name}; feature group: flips {sym.flips}, classes {sym.classes}; "
          f"field {type(base).__name__}; reference {ref_nodes.size} nodes")
    print(f"{'nodes':>8} {'variant':>12} {'orbit':>6} {'rms error':>11} {'ms/eval':>9} "
          f"{'leak':>9}")
    table: dict[str, list[tuple[int, float, float]]] = {}
    for n in samples:
        for var, (m, features) in variants(model).items():
            errs, leaks, size, orbit, secs = [], [], 0, 1, 0.0
            for seed in range(seeds):
                nodes = key_nodes(m, QuasiMonteCarlo(samples=n, seed=seed), features=features)
                field = eqx.tree_at(lambda f: f.model, eqx.tree_at(lambda f: f.nodes, base,
                                                                   nodes), m)
                out = evaluate(field, states)
                est = np.stack([flat(jax.tree.map(lambda x: x[i], out)) for i in range(2)])
                errs.append(np.mean((est - ref_flat) ** 2))
                leaks.append(leak(jax.tree.map(lambda x: x[0], evaluate(field, on_subspace)),
                                  sym))
                size, orbit = nodes.size, getattr(nodes, "orbit", 1)
                if seed == 0:
                    secs = timed(field, states)
            rms = float(np.sqrt(np.mean(errs)))
            table.setdefault(var, []).append((size, rms, secs))
            print(f"{size:>8} {var:>12} {orbit:>6} {rms:>11.3e} {1e3 * secs:>9.2f} "
                  f"{max(leaks):>9.1e}")
    new = table["model"]
    for var, rows in table.items():
        if var == "model":
            continue
        size, err, secs = (np.log(np.array(c)) for c in zip(*rows))
        order = np.argsort(err)
        for n_new, e_new, t_new in {row[0]: row for row in new}.values():
            if not err.min() <= np.log(e_new) <= err.max():
                print(f"   {var}: error {e_new:.2e} of model@{n_new} outside the range "
                      f"measured for {var}")
                continue
            n_old = np.exp(np.interp(np.log(e_new), err[order], size[order]))
            t_old = np.exp(np.interp(np.log(e_new), err[order], secs[order]))
            print(f"   {var} needs {n_old:.0f} nodes ({n_old / n_new:.1f}x) and "
                  f"{t_old / t_new:.1f}x the time for the error of model@{n_new} "
                  f"({e_new:.2e})")


def run_rules(name: str, sets: list[str], samples: list[int], seeds: int, reference: int,
              t_long: float) -> None:
    cfg = d.load_config(CONFIGS / f"{name}.toml", sets).replace(**{"ode.expectation": "qmc"})
    model = cfg.build_model()
    base = build_field(cfg, model)
    start = initial_state(cfg, model).on_manifold()
    t0 = time.perf_counter()
    run = run_ode(cfg.replace(**{"training.t_max": t_long, "ode.samples": 16384,
                                 "output.n_save": 2}))
    late = jax.tree.map(lambda x: x[-1], run.overlaps).on_manifold()
    print(f"\n== {name} {' '.join(sets)}: H={model.H} F={model.F} L={model.L} "
          f"{model.activation.name}; ODE to t = {t_long:g} in {time.perf_counter() - t0:.0f} s, "
          f"risk {float(run.risk[-1]):.6g}")
    states = jax.tree.map(lambda a, b: jnp.stack([a, b]), start, late)

    def field_on(rule) -> tuple[Any, int]:
        nodes = key_nodes(model, rule)
        return eqx.tree_at(lambda f: f.nodes, base, nodes), nodes.size

    refs = {"sparse": field_on(SparseGrid(samples=reference)),
            "qmc": field_on(QuasiMonteCarlo(samples=reference, seed=999))}
    ref_flat = {k: [flat(jax.tree.map(lambda x, i=i: x[i], evaluate(f, states)))
                    for i in range(2)] for k, (f, _) in refs.items()}
    scale = [float(np.max(np.abs(r))) for r in ref_flat["qmc"]]
    gap = [float(np.sqrt(np.mean((ref_flat["qmc"][i] - ref_flat["sparse"][i]) ** 2)))
           for i in range(2)]
    print(f"references: a sparse grid of {refs['sparse'][1]} nodes and QMC on "
          f"{refs['qmc'][1]}; field scale (largest entry) {scale[0]:.3e} at the start, "
          f"{scale[1]:.3e} at t = {t_long:g}; the references differ by {gap[0]:.2e}, "
          f"{gap[1]:.2e} (rms)")
    print("rms error of the field against each reference, at the start and at t_long")
    print(f"{'rule':>7} {'nodes':>8} {'start/sp':>10} {'start/qmc':>10} {'late/sp':>10} "
          f"{'late/qmc':>10} {'ms/eval':>9}")
    for n in samples:
        for rule_name in ("qmc", "sparse"):
            errs, size, secs = [], 0, 0.0
            for seed in range(seeds if rule_name == "qmc" else 1):
                rule = (QuasiMonteCarlo(samples=n, seed=seed) if rule_name == "qmc"
                        else SparseGrid(samples=n))
                try:
                    field, size = field_on(rule)
                except d.ConfigError:
                    break
                out = evaluate(field, states)
                est = [flat(jax.tree.map(lambda x, i=i: x[i], out)) for i in range(2)]
                errs.append([np.mean((est[i] - ref_flat[k][i]) ** 2)
                             for i in range(2) for k in ("sparse", "qmc")])
                if seed == 0:
                    secs = timed(field, states)
            if not errs:
                continue
            rms = np.sqrt(np.mean(errs, axis=0))
            print(f"{rule_name:>7} {size:>8} " + " ".join(f"{e:>10.2e}" for e in rms)
                  + f" {1e3 * secs:>9.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="demo,stages_mean,activations_onehot")
    p.add_argument("--samples", default="256,1024,4096")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--reference", type=int, default=1 << 16)
    p.add_argument("--rules", action="store_true", help="qmc against sparse grids")
    p.add_argument("--set", action="append", default=[], help="config override (--rules)")
    p.add_argument("--t-long", type=float, default=200.0)
    a = p.parse_args()
    for name in a.configs.split(","):
        samples = [int(s) for s in a.samples.split(",")]
        if a.rules:
            run_rules(name, a.set, samples, a.seeds, a.reference, a.t_long)
        else:
            run_config(name, samples, a.seeds, a.reference)


if __name__ == "__main__":
    main()
