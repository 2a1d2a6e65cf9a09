"""Pruning trained heads without retraining (`docs/activations.md`).

Removing head h from a trained model (H → H−1) deletes its key, value and bias: the remaining
heads' fields keep their joint Gaussian law (the corresponding sub-blocks of the overlaps), the
removed head's fields simply no longer enter the prediction. We evaluate that *exactly* by
restricting the activation to the kept heads ([`Pruned`][]): the removed heads get zero attention
and the kept ones are normalized among themselves, which for every activation is the
`(H−1)`-head model (for Bayes-softmax the joint normalization then runs over the kept heads
only). Evaluating all subsets of heads on the *same* Gaussian nodes (common random numbers) makes
the differences between pruning steps far more accurate than their absolute values;
[`remove_heads`][] builds the literally smaller state, and the tests check that both agree.

Definitions (see `docs/activations.md`):

- importance criteria: `greedy` removes, at each step, the head whose removal raises the risk
  least (recomputed after every removal); `ablation` ranks heads once by the risk of the model
  without that head alone; `random` orders are the control;
- `prunable`: the number of heads removed (in the criterion's order) before the risk first
  exceeds `(1 + 5%) ×` the unpruned risk;
- the *first needed head* is the next one: the jump of the risk at that removal.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from headflow.dynamics import (SIGNAL, HeadflowError, Model, Overlaps, key_expectation,
                               population_risk)
from headflow.dynamics import risk_nodes as make_risk_nodes
from headflow.dynamics.activations import AbstractActivation
from headflow.dynamics.measures import alignment
from headflow.dynamics.expectations import AbstractExpectation, AbstractNodes

from headflow.dynamics.ode import NodeChange

from ._constants import CRITERIA as CRITERIA  # light: shown by `--help`
from ._constants import PRUNABLE_TOLERANCE as PRUNABLE_TOLERANCE
from .convergence import Claim, judge


class Pruned(AbstractActivation):
    """`base` restricted to the heads `keep`: the kept heads' attention is `base` applied to
    their logits and biases alone (so any joint normalization runs over the kept heads only), the
    removed heads' attention is zero. The prediction is then exactly that of the model with the
    other heads removed."""

    name: ClassVar[str] = "pruned"
    label: ClassVar[str] = "pruned"
    base: AbstractActivation
    keep: tuple[int, ...] = eqx.field(static=True)

    def __call__(self, logits: Float[Array, "heads tokens"],
                 bias: Float[Array, " heads"]) -> Float[Array, "heads tokens"]:
        out = jnp.zeros_like(logits)
        if not self.keep:
            return out
        idx = np.asarray(self.keep, dtype=np.int64)
        return out.at[idx].set(self.base(logits[idx], bias[idx]))


def pruned_model(model: Model, keep) -> Model:
    """`model` with only the heads `keep` (indices) active; see [`Pruned`][]."""
    base = model.activation.base if isinstance(model.activation, Pruned) else model.activation
    keep = tuple(sorted(int(h) for h in keep))
    if any(h < 0 or h >= model.H for h in keep):
        raise HeadflowError(f"heads to keep {keep} out of range for H = {model.H}")
    return dataclasses.replace(model, activation=Pruned(base=base, keep=keep))


def remove_heads(ov: Overlaps, keep) -> Overlaps:
    """The overlaps of the kept heads only (rows/columns of `m, q, n, s, b` and the cross
    overlaps): the state of the literally smaller model."""
    idx = np.asarray(sorted(int(h) for h in keep), dtype=np.int64)
    return Overlaps(m=ov.m[idx], q=ov.q[np.ix_(idx, idx)], n=ov.n[idx],
                    s=ov.s[np.ix_(idx, idx)], b=ov.b[idx], kv=ov.kv[np.ix_(idx, idx)],
                    kvs=ov.kvs[idx], vks=ov.vks[idx])


@eqx.filter_jit
def _risk(model: Model, ov: Overlaps, nodes: AbstractNodes, manifold: bool):
    return population_risk(model, ov, nodes, manifold=manifold)


class SubsetRisk:
    """Risk of any subset of heads of one trained state, on common nodes, memoized."""

    def __init__(self, model: Model, ov: Overlaps, backend: AbstractExpectation, *,
                 manifold: bool):
        self.model, self.ov, self.backend, self.manifold = model, ov, backend, manifold
        self.nodes = make_risk_nodes(model, backend)
        self._cache: dict[tuple[int, ...], tuple[float, float]] = {}

    def __call__(self, keep) -> tuple[float, float]:
        keep = tuple(sorted(int(h) for h in keep))
        if keep not in self._cache:
            r, e = _risk(pruned_model(self.model, keep), self.ov, self.nodes, self.manifold)
            self._cache[keep] = (float(r), float(e))
        return self._cache[keep]


class PruneCurve(eqx.Module):
    """Risk versus the number of heads removed (0..H) in one order.

    **Fields:** `criterion`, `order` (head indices in removal order, length H), `risk` and
    `risk_err` (H+1; entry k: after removing the first k heads of `order`).
    """

    criterion: str = eqx.field(static=True)
    order: tuple[int, ...] = eqx.field(static=True)
    risk: np.ndarray
    risk_err: np.ndarray

    def prunable(self, tol: float = PRUNABLE_TOLERANCE) -> int:
        return prunable_count(self.risk, tol)


def prunable_count(risk, tol: float = PRUNABLE_TOLERANCE) -> int:
    """Heads removed before the risk first exceeds `(1 + tol) × risk[0]`."""
    return _count_before_excess(excess_over_tolerance(risk, tol))


def _count_before_excess(excess) -> int:
    """Removals before the first positive entry of an [`excess_over_tolerance`][] curve."""
    over = np.nonzero(np.asarray(excess) > 0)[0]
    return int(over[0] - 1) if over.size else len(excess) - 1


def curve_for_order(sub: SubsetRisk, order, criterion: str) -> PruneCurve:
    H = sub.model.H
    order = tuple(int(h) for h in order)
    if sorted(order) != list(range(H)):
        raise HeadflowError(f"a pruning order must be a permutation of the {H} heads, "
                            f"got {order}")
    vals = [sub(tuple(h for h in range(H) if h not in order[:k])) for k in range(H + 1)]
    return PruneCurve(criterion=criterion, order=order, risk=np.array([v[0] for v in vals]),
                      risk_err=np.array([v[1] for v in vals]))


def prune_curve(model: Model, ov: Overlaps, backend: AbstractExpectation, *,
                criterion: str = "greedy", manifold: bool = True,
                sub: SubsetRisk | None = None) -> PruneCurve:
    """Remove heads one at a time by `criterion` (no retraining) and record the risk.

    **Arguments:** `model` (its H is the number of trained heads), `ov` the trained state
    (ODE state, or the overlaps of SGD weights), `backend` the expectation rule, `criterion`:
    `"greedy"` (remove the head whose removal raises the risk least, recomputed each step) or
    `"ablation"` (rank once by the single-head ablation risk), `manifold` (ignore the cross
    overlaps: True for ODE states on the invariant manifold, False for SGD weights).

    **Returns:** a [`PruneCurve`][] with H+1 risks (0..H heads removed).
    """
    if criterion not in CRITERIA:
        raise HeadflowError(f"pruning criterion {criterion!r}: choose one of "
                            f"{', '.join(CRITERIA)}")
    sub = SubsetRisk(model, ov, backend, manifold=manifold) if sub is None else sub
    H = model.H
    if criterion == "ablation":
        scores = [sub(tuple(j for j in range(H) if j != h))[0] for h in range(H)]
        return curve_for_order(sub, tuple(int(h) for h in np.argsort(scores, kind="stable")),
                               criterion)
    kept, order = list(range(H)), []
    while kept:
        risks = [sub(tuple(j for j in kept if j != h))[0] for h in kept]
        h = kept[int(np.argmin(risks))]
        order.append(h)
        kept.remove(h)
    return curve_for_order(sub, order, criterion)


def random_curves(sub: SubsetRisk, n_orders: int, seed: int = 0) -> list[PruneCurve]:
    """The control: `n_orders` uniformly random removal orders."""
    rng = np.random.default_rng(seed)
    return [curve_for_order(sub, tuple(int(h) for h in rng.permutation(sub.model.H)), "random")
            for _ in range(n_orders)]


def first_needed_jump(curve: PruneCurve, tol: float = PRUNABLE_TOLERANCE) -> dict | None:
    """The risk jump at the first removal that costs more than `tol` (relative): removing the
    first *needed* head. `None` when every head can go within the tolerance."""
    k = curve.prunable(tol)
    H = len(curve.order)
    if k >= H:
        return None
    before, after = float(curve.risk[k]), float(curve.risk[k + 1])
    return {"pruned_before": k, "head": int(curve.order[k]), "risk_before": before,
            "risk_after": after, "jump": after - before,
            "jump_rel": (after - before) / before if before > 0 else float("inf")}


def head_statistics(model: Model, ov: Overlaps, backend: AbstractExpectation, *,
                    manifold: bool = True) -> dict[str, np.ndarray]:
    """Descriptive statistics of each head of a trained state: its mean attention on the signal
    token `E A_{h1}` and in total `E Σ_ℓ A_{hℓ}`, its value alignment `n_h`, its key norm
    `√q_hh` and the cosines `m_hf/√q_hh` with the teacher directions, and for discrete priors
    the cosines with the support points."""
    def attention(chi_star, chi):
        del chi_star
        A = model.attention(chi, ov.b)
        return jnp.stack([A[:, SIGNAL], jnp.sum(A, axis=-1)])

    mean, _ = eqx.filter_jit(key_expectation)(model, ov, backend, attention, manifold=manifold)
    mean = np.asarray(mean)
    norm = np.sqrt(np.clip(np.diag(np.asarray(ov.q)), 1e-300, None))
    out = {"attention_signal": mean[0], "attention_total": mean[1], "n": np.asarray(ov.n),
           "key_norm": norm, "cos_features": alignment(np.asarray(ov.m), np.asarray(ov.q))}
    points = getattr(model.prior, "points", None)
    if points is not None:
        P = np.asarray(points)
        pn = np.linalg.norm(P, axis=1)
        out["cos_points"] = (np.asarray(ov.m) @ P.T) / (norm[:, None] * np.where(pn > 0, pn, 1))
    return out


def excess_over_tolerance(risk, tol: float = PRUNABLE_TOLERANCE) -> np.ndarray:
    """`risk_k − (1 + tol)·risk_0` for k = 0..H heads removed: [`prunable_count`][] counts the
    removals before the first positive entry."""
    risk = np.asarray(risk, dtype=np.float64)
    return risk - (1.0 + tol) * risk[0]


def prunable_verdict(activation: str, risk, check: NodeChange | None, expected: int,
                     risk_err=None, tol: float = PRUNABLE_TOLERANCE) -> Claim:
    """"`expected` heads (H − F) can be pruned": the prunable count of the curve `risk` equals
    `expected`. The count is read off the signs of [`excess_over_tolerance`][] after k = 1, 2, …
    removals, up to one past the larger of the count and `expected`, so the claim is decided
    when each of those entries keeps its sign: its |excess| above its own node
    change (`check`, the excess curve's `value`/`value_fine`) plus twice the curve's sampling
    error. The claim's margin and check are those of the entry closest to that bound (the
    binding entry); an entry far from the 5% line does not lend its larger node change to
    another one."""
    e = excess_over_tolerance(risk, tol)
    n = prunable_count(risk, tol)
    upto = min(max(n, expected) + 1, len(e) - 1)
    err = 0.0 if risk_err is None else float(np.max(np.asarray(risk_err)[:upto + 1]))
    fine = None
    margin = float(np.min(np.abs(e[1:upto + 1]))) if upto >= 1 else float("inf")
    checks: list[NodeChange] = []
    if check is not None:
        e_f = np.asarray(check.value_fine, float)
        if e_f.shape == e.shape and np.all(np.isfinite(e_f)) and upto >= 1:
            fine = _count_before_excess(e_f) == expected
            k = 1 + int(np.argmin(np.abs(e[1:upto + 1]) - np.abs(e[1:upto + 1]
                                                                  - e_f[1:upto + 1])))
            margin = float(abs(e[k]))
            checks = [dataclasses.replace(check, quantity=f"{check.quantity}, after {k} removals",
                                          value=float(e[k]), value_fine=float(e_f[k]))]
        else:
            checks = [check]                    # a curve missing on 4x the nodes: change inf
    return judge(f"{activation}: {expected} heads prunable within {100 * tol:g}%", n == expected,
                 margin, checks, holds_fine=fine, error=2 * err,
                 numbers={"prunable": n, "expected": expected, "risk": np.asarray(risk).tolist(),
                          "excess": e.tolist(),
                          "excess_fine": None if check is None
                          else np.asarray(check.value_fine, float).tolist()})
