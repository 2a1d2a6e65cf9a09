"""The five experiments of the bounds paper, multi-head coverage and the normalizers side by
side, on one checkpoint and one text (docs/gpt2.md, "The experiments").

One forward pass at the largest L extracts q, k, v and the attention of every head; for causal
attention the window of the first L tokens is exactly the top-left `L × L` block of that pass, so
every L of experiments 1 and 3 is a prefix of its rows. The heads of one layer are processed
together (vectorized over heads, rows and N; a Python loop runs over layers only, to bound memory
and show progress). Every normalizer of `BoundsConfig.normalizers` is applied to the same logits
(softmax is the model's own attention). Per-row results come back to the host, where
`_summaries` averages them per head and summarizes each experiment.

Row statistics use the rows whose selection leaves something out (`L_t > N`, i.e. query
positions `t ≥ N`); rows that see at most N tokens are trivial.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax import lax
from jaxtyping import Array, Float, Int, PRNGKeyArray

from headflow.dynamics import HeadflowError, check_stop

from ._bounds_config import BoundsConfig
from ._distance import (
    distance_tables,
    fixed_set_bound,
    random_set_distances,
    selection_distance,
    topn_distances,
)
from ._linalg import dot
from ._model import GPT2
from ._normalizers import AbstractNormalizer, normalizer_from_name
from ._selection import causal_context, random_ranks, topn_order, topn_order_host, visible_mask
from ._sensitivity import fd_sensitivity, random_unit_directions
from ._separability import distinguished, separability_curve
from ._summaries import ExperimentData, comparison_row, summarize
from ._vanishing import attention_entropy, weight_bound_violations

EXPERIMENTS = ExperimentData._fields


# --------------------------------------------------------------------------------------------
# Per-layer (chunk of heads) computations; every array is (heads, rows, ...).


def _distance_chunk(attn, x, ranks, order, mc_ranks, context, *, ns, reading, rtol, bounded):
    """Experiments 1–2: d̃, the random-set formula and Monte Carlo, and Theorem 1's bound.

    `mc_ranks` `(samples, rows, tokens)`: random orders shared by heads and N (each N-subset
    `{ranks < N}` is uniformly random, which is all the expectation needs). `bounded`: the
    weights are non-negative, as Theorem 1's proof needs (otherwise the bound is NaN).
    """
    samples = mc_ranks.shape[0]
    cols = {name: [] for name in ("top", "formula", "mc", "mc_sem", "bound", "bound_max",
                                  "d1_exact", "violation")}
    formulas = random_set_distances(attn, x, context, jnp.asarray(ns, jnp.int32), reading=reading)
    tables = distance_tables(x) if bounded else None
    for j, n in enumerate(ns):
        selected = ranks < n
        d = selection_distance(attn, x, selected, context, reading=reading)
        formula = formulas[..., j]
        draws = lax.map(lambda rr, n=n: selection_distance(attn, x, rr < n, context,
                                                           reading=reading), mc_ranks)
        cols["top"].append(d)
        cols["formula"].append(formula)
        cols["mc"].append(jnp.mean(draws, axis=0))
        cols["mc_sem"].append(jnp.std(draws, axis=0, ddof=1) / jnp.sqrt(samples) if samples > 1
                              else jnp.zeros_like(d))
        if bounded:
            b = fixed_set_bound(attn, x, selected, context, order[..., :n], exact=False,
                                tables=tables, reading=reading)
            scale = jnp.maximum(b.bound, d)
            cols["bound"].append(b.bound)
            cols["bound_max"].append(b.bound_max)
            cols["d1_exact"].append(b.d1_exact)
            cols["violation"].append((d > b.bound + rtol * scale)
                                     & jnp.broadcast_to(context > n, d.shape))
        else:
            nan = jnp.full_like(d, jnp.nan)
            cols["bound"].append(nan)
            cols["bound_max"].append(nan)
            cols["d1_exact"].append(jnp.zeros(d.shape, bool))
            cols["violation"].append(jnp.zeros(d.shape, bool))
    return {name: jnp.stack(v, axis=-1) for name, v in cols.items()}


def _critical_chunk(attn, x, ranks, mc_ranks, context, *, grid, reading):
    """Experiment 3: per row and N of the grid, d̃ of the top-N set, the random-set formula, and
    d̃ of one uniformly random N-subset per row (its token mean estimates the exact expectation).
    """
    ns = jnp.asarray(grid, jnp.int32)
    return {"top": topn_distances(attn, x, ranks, context, ns, reading=reading),
            "formula": random_set_distances(attn, x, context, ns, reading=reading),
            "mc": topn_distances(attn, x, mc_ranks, context, ns, reading=reading)}


def _separability_chunk(attn, x, order, ranks, context, *, ns, radius, rtol, bounded):
    """Experiment 4: N_s/N with Theorem 2's bounds for every N (per row); the bounds need
    non-negative weights (`bounded`), otherwise they are NaN."""
    sep = separability_curve(attn, x, order, ranks, context, ns, sphere_radius=radius)
    valid = sep.valid
    if not bounded:
        nan = jnp.full_like(sep.ratio, jnp.nan)
        none = jnp.zeros(valid.shape, bool)
        return {"ratio": sep.ratio, "lower": nan, "upper": nan, "valid": valid,
                "delta_zero": valid & (sep.delta == 0), "violation": none, "upper_exceeded": none}
    return {"ratio": sep.ratio, "lower": sep.lower, "upper": sep.upper, "valid": valid,
            "delta_zero": valid & (sep.delta == 0),
            "violation": valid & (sep.ratio < sep.lower - rtol),
            "upper_exceeded": valid & (sep.ratio > sep.upper + rtol)}


def _coverage_chunk(attn, x, context, *, ns, radius):
    """Multi-head coverage: the top-N set of the layer's head-mean weights is the target of
    every head; per N, which heads distinguish which of its tokens (Theorem 2's criterion)."""
    order, ranks = topn_order(jnp.mean(attn, axis=0), context)
    out = {}
    for n in ns:
        flags, valid = distinguished(attn, x, ranks < n, context, order[..., :n],
                                     sphere_radius=radius)
        # a block whose rows see fewer than N tokens lists fewer members (its rows are invalid)
        flags = jnp.pad(flags, [(0, 0)] * (flags.ndim - 1) + [(0, n - flags.shape[-1])])
        out[f"p_{n}"] = jnp.mean(flags, axis=-1, dtype=attn.dtype)  # (heads, rows)
        out[f"k_{n}"] = jnp.sum(flags, axis=0, dtype=jnp.int32)[None]  # (1, rows, n)
        out[f"valid_{n}"] = valid[:1]  # (1, rows): the same for every head
    return out


def _gradient_chunk(q, k, rows, key, *, normalizer: AbstractNormalizer, temps, eps, steps, rtol):
    """Experiment 5: the Jacobian's spectral norm, its largest diagonal entry and the
    finite-difference sensitivity against temperature, for `N(l/T)` on the raw logits `q·k`
    (GPT-2 itself uses `T = √d_head`), with the normalizer's rigorous Jacobian bounds."""
    logits = dot("hrd,htd->hrt", q[:, rows, :], k)
    mask = visible_mask(rows + 1, k.shape[-2])
    mask = jnp.broadcast_to(mask, logits.shape)
    u = random_unit_directions(key, logits.shape, mask, dtype=logits.dtype)
    bounds = normalizer.jacobian_bounds((rows + 1).astype(logits.dtype))
    if bounds is not None:
        bounds = (jnp.broadcast_to(bounds[0], logits.shape[:-1]),
                  jnp.broadcast_to(bounds[1], logits.shape[:-1]))

    def per_t(t):
        z = logits / t
        norm = normalizer.jacobian_norm(z, mask, iterations=steps) / t
        diag = jnp.max(normalizer.jacobian_diagonal(z, mask), axis=-1) / t
        fd = jnp.stack([fd_sensitivity(logits, u, t, e, mask, normalizer=normalizer) for e in eps],
                       axis=-1)
        if bounds is None:
            spectral_bad = diag_bad = jnp.zeros((), jnp.int32)
        else:
            spectral_bad = jnp.sum(norm > (1 + rtol) * bounds[0] / t)
            diag_bad = jnp.sum(diag > (1 + rtol) * bounds[1] / t)
        return (jnp.mean(norm, axis=-1), jnp.mean(diag, axis=-1), jnp.mean(fd, axis=-2),
                spectral_bad, diag_bad)

    norm, diag, fd, spectral_bad, diag_bad = lax.map(per_t, jnp.asarray(temps, logits.dtype))
    return {"norm": norm.T, "diag": diag.T, "fd": jnp.moveaxis(fd, 0, 1),
            "spectral_violations": jnp.sum(spectral_bad), "diag_violations": jnp.sum(diag_bad)}


def _vanishing_chunk(attn, q, k, temperature, *, rtol, corollary1, entropy):
    """Lemma 1 / Corollary 1 on the weights (`corollary1`: the weights are the model's softmax),
    attention entropy (`entropy`: `"plain"`, `"renormalized"` for non-negative weights that do
    not sum to one, `"none"` for signed ones), `L_t · max_j α_j`, and the zero weights."""
    context = causal_context(attn.shape[-1])
    visible = jnp.broadcast_to(visible_mask(context, attn.shape[-1]), attn.shape)
    if corollary1:
        bad = weight_bound_violations(attn, q, k, context, temperature, rtol=rtol)
    else:
        bad = jnp.zeros(attn.shape[:-1], jnp.int32)
    knorm = lax.cummax(jnp.linalg.norm(k, axis=-1), axis=1)
    delta = jnp.linalg.norm(q, axis=-1) * knorm
    if entropy == "plain":
        ent = attention_entropy(attn)
    elif entropy == "renormalized":
        total = jnp.sum(attn, axis=-1, keepdims=True)
        ent = attention_entropy(attn / jnp.where(total > 0, total, 1))
    else:
        ent = jnp.full(attn.shape[:-1], jnp.nan, attn.dtype)
    return {"entropy": ent, "violations": jnp.sum(bad, axis=-1),
            "two_delta_over_t": 2 * delta / temperature,
            "peak_times_L": jnp.max(attn, axis=-1) * context.astype(attn.dtype)[None],
            "zeros": jnp.sum(visible & (attn == 0), axis=-1),
            "visible": jnp.broadcast_to(context, attn.shape[:-1])}


def _normalize(q, k, scale, *, normalizer: AbstractNormalizer):
    """The normalizer's causal weights on the model's logits `q·k · scale`."""
    logits = dot("hqd,hkd->hqk", q, k) * scale
    return normalizer(logits, visible_mask(causal_context(q.shape[-2]), k.shape[-2]))


# --------------------------------------------------------------------------------------------


# Compiled chunk programs of this process, keyed by program, static options and argument
# shapes: a second run with the same shapes (another model of the same head shape, another
# normalizer of the same kind, the same config again) reuses them.
_COMPILED: dict[tuple, Any] = {}


def _program_key(name: str, fn, args) -> tuple:
    func, options = (fn.func, fn.keywords) if isinstance(fn, functools.partial) else (fn, {})
    avals = tuple((a.shape, str(a.dtype)) for a in jax.tree_util.tree_leaves(args))
    return (name, func.__module__, func.__qualname__, repr(sorted(options.items())), avals,
            bool(jax.config.read("jax_enable_x64")))


class _Timer:
    """Compile each chunk program once (AOT, timed separately, cached per process), then time
    the runs."""

    def __init__(self):
        self.compile_s: dict[str, float] = {}
        self.run_s: dict[str, float] = {}

    def __call__(self, name, fn, *args):
        key = _program_key(name, fn, args)
        if key not in _COMPILED:
            t = time.perf_counter()
            _COMPILED[key] = jax.jit(fn).lower(*args).compile()
            self.compile_s[name] = self.compile_s.get(name, 0.0) + time.perf_counter() - t
        t = time.perf_counter()
        out = jax.block_until_ready(_COMPILED[key](*args))
        out = jax.tree_util.tree_map(np.asarray, out)
        self.run_s[name] = self.run_s.get(name, 0.0) + time.perf_counter() - t
        return out


def _sort(attn, context, timer: _Timer):
    """`topn_order` of a block of rows: numpy's SIMD sort on CPU (the heads split between two
    threads; numpy releases the GIL while sorting), the device sort elsewhere."""
    t = time.perf_counter()
    if jax.default_backend() == "cpu":
        a, c = np.asarray(attn), np.asarray(context)
        halves = np.array_split(np.arange(a.shape[0]), min(2, a.shape[0]))
        with ThreadPoolExecutor(len(halves)) as pool:
            parts = list(pool.map(lambda h: topn_order_host(a[h], c), halves))
        order = jnp.asarray(np.concatenate([p[0] for p in parts]))
        ranks = jnp.asarray(np.concatenate([p[1] for p in parts]))
    else:
        order, ranks = jax.block_until_ready(jax.jit(topn_order)(attn, context))
    timer.run_s["sort"] = timer.run_s.get("sort", 0.0) + time.perf_counter() - t
    return order, ranks


@eqx.filter_jit
def extract(model: GPT2, tokens: Int[Array, " tokens"],
            capture: tuple[str, ...] = ("q", "k", "v", "attn")):
    """One compiled forward pass that returns only what `capture` names (no logits).

    **Arguments:** the model, token ids, and any of `"q"`, `"k"`, `"v"`, `"attn"`, `"hidden"`.

    **Returns:** a [`GPT2Output`][].
    """
    return model(tokens, capture=capture, logits=False)


@dataclasses.dataclass(frozen=True)
class BoundsResult:
    """What [`run_bounds`][] returns: the JSON-able `report` and the per-N / per-L `curves`
    (numpy arrays, saved as `curves.npz`).

    With several normalizers, `report` holds the first one's sections at the top level, every
    normalizer's full report under `report["normalizers"][name]` and the headline numbers side
    by side under `report["normalizer_comparison"]`; the curves of the others are prefixed
    `"<name>/"`.
    """

    report: dict
    curves: dict


def _check_inputs(model: GPT2, tokens: np.ndarray, cfg: BoundsConfig) -> np.ndarray:
    tokens = np.asarray(tokens, dtype=np.int32)
    if tokens.ndim == 1:
        tokens = tokens[None]
    if tokens.ndim != 2 or tokens.shape[1] != cfg.length:
        raise HeadflowError(f"run_bounds: tokens have shape {tokens.shape}, config wants "
                            f"(windows, L={cfg.length})")
    if cfg.length > model.config.n_positions:
        raise HeadflowError(f"L={cfg.length} exceeds the model's context n_positions="
                            f"{model.config.n_positions}; use a smaller --length")
    return tokens


def run_bounds(model: GPT2, tokens: Int[np.ndarray, "windows length"] | Int[np.ndarray, " length"],
               config: BoundsConfig | None = None, *, progress: bool | None = None) -> BoundsResult:
    """Run the five experiments, the multi-head coverage and the rigorous checks (docs/gpt2.md,
    "The experiments") on `model` and token windows, for every normalizer of the config.

    **Arguments:**

    - `model`: a [`GPT2`][].
    - `tokens`: int array `(windows, L)` with `L = config.length` (from [`text_tokens`][]).
    - `config`: a [`BoundsConfig`][] (default: `BoundsConfig()`).
    - `progress`: show a progress bar (default: when stderr is a terminal).

    **Returns:** a [`BoundsResult`][] (`report` as written to `report.json`).
    """
    t_start = time.perf_counter()
    cfg, mcfg = config if config is not None else BoundsConfig(), model.config
    tokens = _check_inputs(model, tokens, cfg)
    if progress is None:
        progress = sys.stderr.isatty()
    length, layers = cfg.length, mcfg.n_layer
    timer = _Timer()
    grid = cfg.grid
    dist_ns = tuple(sorted(set(cfg.n_values) | {cfg.n_fixed}))
    sep_ns = tuple(sorted(set(cfg.separability_n)))
    rows_grad = _gradient_rows(length, cfg.gradient_rows)
    max_n = max(max(dist_ns), max(sep_ns))
    capture = ("q", "k", "v", "attn") + (("hidden",) if cfg.vectors == "hidden" else ())
    base_t = (mcfg.d_head ** 0.5) if mcfg.scale_attn_weights else 1.0
    normalizers = {name: normalizer_from_name(name, ssmax_length=cfg.ssmax_length)
                   for name in cfg.normalizers}

    chunks: dict[str, dict[str, list]] = {name: {e: [] for e in EXPERIMENTS}
                                          for name in normalizers}
    grad_viol = {name: [0, 0] for name in normalizers}
    forward_s = 0.0
    key = jr.key(cfg.seed)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=tokens.shape[0] * layers, desc="gpt2 bounds", unit="layer",
                   file=sys.stderr)
    mc_keys = jr.split(jr.fold_in(key, 1_000_003), cfg.mc_samples)
    t = time.perf_counter()
    mc_ranks = jax.block_until_ready(
        jax.jit(jax.vmap(lambda kk: random_ranks(kk, causal_context(length), length)))(mc_keys)
    )
    timer.run_s["sort"] = time.perf_counter() - t
    for w in range(tokens.shape[0]):
        t = time.perf_counter()
        out = jax.block_until_ready(extract(model, jnp.asarray(tokens[w]), capture))
        forward_s += time.perf_counter() - t
        per_window: dict[str, dict[str, list]] = {name: {e: [] for e in EXPERIMENTS}
                                                  for name in normalizers}
        for layer in range(layers):
            check_stop()                 # SIGINT/SIGTERM: stop between layers
            q, k = out.q[layer], out.k[layer]
            x = out.v[layer] if cfg.vectors == "value" else out.hidden[layer][None]
            temperature = base_t * ((layer + 1) if mcfg.scale_attn_by_inverse_layer_idx else 1)
            for name, normalizer in normalizers.items():
                if name == "softmax":
                    attn = out.attn[layer]  # the model's own attention, as computed in the pass
                else:
                    attn = jnp.asarray(
                        timer(
                            f"normalize[{name}]",
                            functools.partial(_normalize, normalizer=normalizer),
                            q,
                            k,
                            jnp.float32(1 / temperature),
                        )
                    )
                parts = _layer_experiments(
                    cfg,
                    timer,
                    attn,
                    q,
                    k,
                    x,
                    mc_ranks,
                    temperature,
                    normalizer,
                    jr.fold_in(jr.fold_in(key, w), layer),
                    rows_grad=rows_grad,
                    grid=grid,
                    dist_ns=dist_ns,
                    sep_ns=sep_ns,
                    max_n=max_n,
                )
                grad_viol[name][0] += int(parts["gradient"].pop("spectral_violations"))
                grad_viol[name][1] += int(parts["gradient"].pop("diag_violations"))
                for e in EXPERIMENTS:
                    per_window[name][e].append(parts[e])
            if bar is not None:
                bar.update(1)
        for name in normalizers:
            for e in EXPERIMENTS:
                chunks[name][e].append(_concat_heads(per_window[name][e]))
        del out
    if bar is not None:
        bar.close()
    reports, curves = {}, {}
    for name, normalizer in normalizers.items():
        data = ExperimentData(**{e: _stack_windows(chunks[name][e]) for e in EXPERIMENTS})
        summary = summarize(
            cfg,
            mcfg,
            data,
            normalizer=name,
            grid=grid,
            dist_ns=dist_ns,
            sep_ns=sep_ns,
            rows_grad=rows_grad,
            model_temperature=base_t,
            jacobian_violations=dict(zip(normalizer.jacobian_bound_names, grad_viol[name])),
            applicable=_applicable(normalizer, name),
        )
        reports[name], curves[name] = summary
    primary = cfg.normalizers[0]
    report = dict(reports[primary])
    all_curves = dict(curves[primary])
    if len(normalizers) > 1:
        report["normalizers"] = reports
        report["normalizer_comparison"] = {name: comparison_row(r) for name, r in reports.items()}
        for name in cfg.normalizers[1:]:
            all_curves.update({f"{name}/{k}": v for k, v in curves[name].items()})
    report["wall_s"] = _wall(timer, forward_s, t_start)
    return BoundsResult(report=report, curves=all_curves)


def _layer_experiments(
    cfg: BoundsConfig,
    timer: _Timer,
    attn: Float[Array, "heads L L"],
    q: Float[Array, "heads L d"],
    k: Float[Array, "heads L d"],
    x: Float[Array, "xheads L dim"],
    mc_ranks: Int[Array, "samples L L"],
    temperature: float,
    normalizer: AbstractNormalizer,
    key: PRNGKeyArray,
    *,
    rows_grad: np.ndarray,
    grid: tuple[int, ...],
    dist_ns: tuple[int, ...],
    sep_ns: tuple[int, ...],
    max_n: int,
) -> dict[str, dict[str, np.ndarray]]:
    """Every experiment on one layer's weights `attn` (of one normalizer), as host arrays with
    the heads first."""
    name, length = normalizer.name, cfg.length
    bounded = normalizer.nonnegative
    entropy = "plain" if normalizer.normalized else "renormalized" if bounded else "none"
    parts = {
        "vanishing": timer(
            f"vanishing[{name}]",
            functools.partial(
                _vanishing_chunk,
                temperature=temperature,
                rtol=cfg.rtol,
                corollary1=name == "softmax",
                entropy=entropy,
            ),
            attn,
            q,
            k,
        )
    }
    blocks: dict[str, list] = {"distance": [], "critical": [], "separability": [],
                               "coverage": []}
    for r0, r1 in _row_blocks(length, cfg.row_blocks):
        # Causal rows r0..r1−1 see only the first r1 tokens: cut the token axis there.
        a_b = attn[:, r0:r1, :r1]
        x_b = x[..., :r1, :]
        ctx_b = jnp.arange(r0 + 1, r1 + 1, dtype=jnp.int32)
        od_b, rk_b = _sort(a_b, ctx_b, timer)
        mc_b = mc_ranks[:, r0:r1, :r1]
        od_b = od_b[..., : min(max_n, r1)]
        tag = f"{r1 - r0}x{r1}"
        blocks["distance"].append(
            timer(
                f"distance[{bounded}]@{tag}",
                functools.partial(
                    _distance_chunk, ns=dist_ns, reading=cfg.reading, rtol=cfg.rtol, bounded=bounded
                ),
                a_b,
                x_b,
                rk_b,
                od_b,
                mc_b,
                ctx_b,
            )
        )
        blocks["critical"].append(
            timer(
                f"critical@{tag}",
                functools.partial(_critical_chunk, grid=grid, reading=cfg.reading),
                a_b,
                x_b,
                rk_b,
                mc_b[0],
                ctx_b,
            )
        )
        blocks["separability"].append(
            timer(
                f"separability[{bounded}]@{tag}",
                functools.partial(
                    _separability_chunk,
                    ns=sep_ns,
                    radius=cfg.sphere_radius,
                    rtol=cfg.rtol,
                    bounded=bounded,
                ),
                a_b,
                x_b,
                od_b,
                rk_b,
                ctx_b,
            )
        )
        blocks["coverage"].append(
            timer(
                f"coverage@{tag}",
                functools.partial(_coverage_chunk, ns=cfg.coverage_n, radius=cfg.sphere_radius),
                a_b,
                x_b,
                ctx_b,
            )
        )
    for kind, found in blocks.items():
        parts[kind] = {k: np.concatenate([p[k] for p in found], axis=1) for k in found[0]}
    parts["gradient"] = timer(
        f"gradient[{name}]",
        functools.partial(
            _gradient_chunk,
            normalizer=normalizer,
            temps=cfg.temperatures,
            eps=cfg.eps,
            steps=cfg.bisection_steps,
            rtol=cfg.rtol,
        ),
        q,
        k,
        jnp.asarray(rows_grad),
        key,
    )
    return parts


def _applicable(normalizer: AbstractNormalizer, name: str) -> dict[str, bool]:
    """Which rigorous checks the normalizer's weights satisfy the assumptions of."""
    return {
        "corollary1_weights": name == "softmax",
        "theorem1_fixed_set": normalizer.nonnegative,
        "theorem2_lower": normalizer.nonnegative,
        "jacobian": normalizer.jacobian_bounds(jnp.asarray(2.0)) is not None,
    }


def _wall(timer: _Timer, forward_s: float, t_start: float) -> dict[str, Any]:
    run: dict[str, Any] = {}
    comp: dict[str, Any] = {}
    for src, dst in ((timer.run_s, run), (timer.compile_s, comp)):
        for k, v in src.items():
            name = k.split("@")[0].split("[")[0]
            dst[name] = dst.get(name, 0.0) + v
    return {
        "forward": round(forward_s, 3),
        "sort": round(run.pop("sort", 0.0), 3),
        **{f"{k}": round(v, 3) for k, v in run.items()},
        "compile": {k: round(v, 3) for k, v in comp.items()},
        "total": round(time.perf_counter() - t_start, 3),
    }


def _row_blocks(length: int, blocks: int) -> list[tuple[int, int]]:
    """Split the query rows into `blocks` ranges of equal size (the last takes the rest)."""
    blocks = max(1, min(blocks, length))
    edges = [round(i * length / blocks) for i in range(blocks + 1)]
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]


def _gradient_rows(length: int, count: int) -> np.ndarray:
    """`count` evenly spaced query rows `t ≥ 1` (all of them for `count = 0`)."""
    if length < 2:
        return np.zeros(1, np.int32)
    if count <= 0 or count >= length - 1:
        return np.arange(1, length, dtype=np.int32)
    return np.unique(np.round(np.linspace(1, length - 1, count)).astype(np.int32))


def _concat_heads(parts: list[dict]) -> dict:
    return {k: np.concatenate([p[k] for p in parts], axis=0) for k in parts[0]}


def _stack_windows(parts: list[dict]) -> dict:
    """Windows become extra rows: (heads, windows, rows, ...)."""
    return {k: np.stack([p[k] for p in parts], axis=1) for k in parts[0]}
