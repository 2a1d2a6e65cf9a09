"""Phases of a trajectory (ODE or SGD alike): the unspecialized plateau, the specialization
stages and the excursions (`docs/phases.md`).

Everything is read off the head–feature alignment `α_hf = m_hf/√q_hh` (the cosine of head h
with feature f, [`headflow.dynamics.measures.alignment`][]), with one threshold `θ` (default
[`headflow.dynamics.measures.ESCAPE_THRESHOLD`][] = 0.2) and hysteresis at `θ/2` against SGD noise
([`headflow.dynamics.measures.persistent_crossing`][]).
Definitions, thresholds and their justification: `docs/phases.md`.

- **separation** of heads h, h': `d_hh'(t) = max_f |α_hf − α_h'f|`; they *separate* at the
  first time `d ≥ θ` after which `d` never falls back below `θ/2` (persistent crossing).
- **stages**: heads not yet separated form groups (connected components of the pairs still
  together); a stage is a time at which a group splits. Its *feature* is the one along which the
  new groups differ most once the split has grown to `2θ` (or at the end of the run), and the
  heads above / below the midpoint along it are the `plus` / `minus` sides.
- **feature times**: `t_f`, the persistent crossing of θ by the spread along feature f,
  `S_f(t) = max_h α_hf − min_h α_hf` (when feature f is first told apart by some heads, even
  heads already separated along another feature); `feature_order` sorts the features by it.
- **plateau**: exit = the first stage (the escape time); entry = the first time the head-mean
  alignment `a(t) = ‖mean_h α_h(t)‖` (running median over 5 saves) reaches 90% of its value at
  the exit. With `a < θ` at the exit (no mean direction to learn) the plateau starts at `t_0`.
- **excursions**: a head whose alignment with a feature reverses sign, from `≥ θ` to `≤ −θ` or
  back (hysteresis band `±θ`), with the time it leaves, crosses zero and arrives.

Any model of the family: "heads" are its exchangeable student units and "features" the
teacher's directions, the alignment being read off the two arrays its [`headflow.dynamics.Layout`][]
names (`(m, q)` for attention, `(R, Q)` for the committee machine, whose features are the
teacher's M hidden units: `α_in = R_in/√Q_ii`); [`layout_phases`][] does the look-up.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np

from headflow.dynamics import ORDER_PARAMETERS, Layout
from headflow.dynamics.measures import (ESCAPE_THRESHOLD, alignment, crossing_shortfall,
                                        escape_crossing, persistent_crossing)
from headflow.dynamics.models.attention import trajectory_risk
from headflow.dynamics.ode import Integrator, backend_of, initial_state, integrate, run_ode

from headflow.dynamics.ode import NodeChange, node_change, node_count

from .convergence import Claim, judge
from .escape import manifold_field

ENTRY_FRACTION = 0.9
"""The plateau starts when the mean alignment reaches this fraction of its value at the exit."""

SMOOTH = 5
"""Width (save points) of the running median applied to the mean alignment."""

SETTLE = 2.0
"""A stage's feature is read when the split has grown to `SETTLE·θ`."""


def _interp_rows(t: np.ndarray, y: np.ndarray, at: float) -> np.ndarray:
    """`y (T, ...)` linearly interpolated at time `at`."""
    k = int(np.clip(np.searchsorted(t, at), 1, len(t) - 1))
    w = 0.0 if t[k] == t[k - 1] else (at - t[k - 1]) / (t[k] - t[k - 1])
    w = float(np.clip(w, 0.0, 1.0))
    return (1 - w) * y[k - 1] + w * y[k]


def _running_median(x: np.ndarray, width: int) -> np.ndarray:
    if width <= 1 or len(x) < 3:
        return x
    h = width // 2
    pad = np.pad(x, h, mode="edge")
    return np.median(np.lib.stride_tricks.sliding_window_view(pad, 2 * h + 1), axis=-1)


@dataclasses.dataclass(frozen=True)
class Stage:
    """One specialization stage: at `time` the group `parent` of heads splits into `children`;
    `feature` (0-based) is the direction of the split, `plus`/`minus` the heads above/below the
    midpoint of the group-mean alignments along it, `gap` their difference (read at
    `read_time`)."""

    time: float
    feature: int
    parent: tuple[int, ...]
    children: tuple[tuple[int, ...], ...]
    plus: tuple[int, ...]
    minus: tuple[int, ...]
    gap: float
    read_time: float

    def to_dict(self) -> dict:
        return {"time": self.time, "feature": self.feature + 1,
                "parent": [h + 1 for h in self.parent],
                "children": [[h + 1 for h in c] for c in self.children],
                "plus": [h + 1 for h in self.plus], "minus": [h + 1 for h in self.minus],
                "gap": self.gap, "read_time": self.read_time}


@dataclasses.dataclass(frozen=True)
class Excursion:
    """Head `head` reverses its alignment with `feature` (both 0-based): it leaves the side
    `from_sign·α ≥ θ` at `t_leave`, crosses zero at `t_cross` and reaches the other side at
    `t_arrive`; `stage` is the index of the stage under way at `t_cross` (None: before the
    first)."""

    head: int
    feature: int
    from_sign: int
    t_leave: float
    t_cross: float
    t_arrive: float
    stage: int | None

    def to_dict(self) -> dict:
        return {"head": self.head + 1, "feature": self.feature + 1, "from_sign": self.from_sign,
                "t_leave": self.t_leave, "t_cross": self.t_cross, "t_arrive": self.t_arrive,
                "stage": None if self.stage is None else self.stage + 1}


@dataclasses.dataclass(frozen=True)
class Phases:
    """The phases of one trajectory ([`detect_phases`][]). Times in units of `t = steps/D`;
    heads and features 0-based here, 1-based in `to_dict` (the JSON files)."""

    threshold: float
    plateau_entry: float | None
    plateau_exit: float | None
    plateau_alignment: float
    stages: tuple[Stage, ...]
    excursions: tuple[Excursion, ...]
    final_alignment: np.ndarray
    separation_times: np.ndarray
    feature_times: tuple[float | None, ...] = ()
    feature_shortfalls: tuple[float, ...] = ()
    """Per feature, how far its head spread stays below θ ([`crossing_shortfall`][]; 0 for a
    feature told apart)."""

    @property
    def feature_order(self) -> list[int]:
        """Features (0-based) sorted by their feature time; those never told apart left out."""
        timed = [(t, f) for f, t in enumerate(self.feature_times) if t is not None]
        return [f for _, f in sorted(timed)]

    @property
    def stage_order(self) -> list[int]:
        """Features of the successive stages (0-based), repeats removed, in time order."""
        out: list[int] = []
        for s in self.stages:
            if s.feature not in out:
                out.append(s.feature)
        return out

    def assignment(self) -> list[dict]:
        """Which direction each head ended with: its dominant feature and sign, or `None` when
        its largest |α| is below θ (a head that learned nothing)."""
        out = []
        for h, a in enumerate(self.final_alignment):
            f = int(np.argmax(np.abs(a)))
            strong = bool(abs(a[f]) >= self.threshold)
            out.append({"head": h + 1, "feature": f + 1 if strong else None,
                        "sign": int(np.sign(a[f])) if strong else 0,
                        "alignment": [float(x) for x in a]})
        return out

    def to_dict(self) -> dict:
        return {"threshold": self.threshold, "plateau_entry": self.plateau_entry,
                "plateau_exit": self.plateau_exit, "plateau_alignment": self.plateau_alignment,
                "stages": [s.to_dict() for s in self.stages],
                "stage_order": [f + 1 for f in self.stage_order],
                "feature_times": list(self.feature_times),
                "feature_shortfalls": list(self.feature_shortfalls),
                "feature_order": [f + 1 for f in self.feature_order],
                "excursions": [e.to_dict() for e in self.excursions],
                "assignment": self.assignment()}


def pair_separation_times(t: np.ndarray, alpha: np.ndarray, threshold: float) -> np.ndarray:
    """`(H, H)` persistent separation times of every pair of heads (inf: never; 0 diagonal)."""
    H = alpha.shape[1]
    out = np.full((H, H), np.inf)
    np.fill_diagonal(out, 0.0)
    for h in range(H):
        for k in range(h + 1, H):
            d = np.max(np.abs(alpha[:, h] - alpha[:, k]), axis=-1)
            c = persistent_crossing(t, d, threshold)
            out[h, k] = out[k, h] = np.inf if c is None else c
    return out


def _components(H: int, together: np.ndarray) -> list[tuple[int, ...]]:
    label = list(range(H))

    def find(i):
        while label[i] != i:
            label[i] = label[label[i]]
            i = label[i]
        return i

    for h in range(H):
        for k in range(h + 1, H):
            if together[h, k]:
                label[find(h)] = find(k)
    groups: dict[int, list[int]] = {}
    for h in range(H):
        groups.setdefault(find(h), []).append(h)
    return sorted(tuple(g) for g in groups.values())


def _stages(t: np.ndarray, alpha: np.ndarray, sep: np.ndarray, threshold: float
            ) -> list[Stage]:
    H = alpha.shape[1]
    times = np.unique(sep[np.triu_indices(H, 1)])
    times = times[np.isfinite(times)]
    stages: list[Stage] = []
    current = _components(H, np.ones((H, H), bool))
    for tau in times:
        new = _components(H, sep > tau)
        for parent in current:
            children = tuple(c for c in new if set(c) <= set(parent))
            if len(children) < 2:
                continue
            def means(at, children=children):
                rows = _interp_rows(t, alpha, at)
                return np.stack([rows[list(c)].mean(axis=0) for c in children])

            # read the direction once the split has grown (SETTLE·θ) or at the end
            read = float(t[-1])
            for k in range(np.searchsorted(t, tau), len(t)):
                g = means(t[k])
                if np.max(g.max(axis=0) - g.min(axis=0)) >= SETTLE * threshold:
                    read = float(t[k])
                    break
            g = means(read)
            spread = g.max(axis=0) - g.min(axis=0)
            f = int(np.argmax(spread))
            mid = 0.5 * (g[:, f].max() + g[:, f].min())
            plus = tuple(sorted(h for c, gm in zip(children, g[:, f]) if gm > mid for h in c))
            minus = tuple(sorted(h for c, gm in zip(children, g[:, f]) if gm <= mid for h in c))
            stages.append(Stage(time=float(tau), feature=f, parent=tuple(parent),
                                children=children, plus=plus, minus=minus,
                                gap=float(spread[f]), read_time=read))
        current = new
    return stages


def _reversals(t: np.ndarray, alpha: np.ndarray, threshold: float, stages: list[Stage]
               ) -> list[Excursion]:
    out = []
    stage_times = np.array([s.time for s in stages])
    T, H, F = alpha.shape
    for h in range(H):
        for f in range(F):
            a = alpha[:, h, f]
            side = np.where(a >= threshold, 1, np.where(a <= -threshold, -1, 0))
            state, last_idx = 0, -1
            for i in range(T):
                if side[i] == 0:
                    continue
                if state != 0 and side[i] != state:
                    leave = last_idx
                    seg = a[leave:i + 1] * state
                    z = leave + int(np.argmax(seg <= 0))
                    a0, a1 = a[z - 1], a[z]
                    t_cross = float(t[z - 1] + (0 - a0) / (a1 - a0) * (t[z] - t[z - 1])) \
                        if a1 != a0 else float(t[z])
                    k = int(np.searchsorted(stage_times, t_cross, side="right")) - 1
                    out.append(Excursion(head=h, feature=f, from_sign=int(state),
                                         t_leave=float(t[leave]), t_cross=t_cross,
                                         t_arrive=float(t[i]), stage=k if k >= 0 else None))
                state, last_idx = side[i], i
    return sorted(out, key=lambda e: e.t_cross)


def detect_phases(t: np.ndarray, m: np.ndarray, q: np.ndarray, *,
                  threshold: float = ESCAPE_THRESHOLD, escape: float | None = None) -> Phases:
    """The phases of one trajectory.

    **Arguments:** `t (T)`, `m (T, H, F)`, `q (T, H, H)` (one run: an ODE solution or one SGD
    seed), `threshold` θ; `escape`: the plateau exit of a run with a single unit, which has no
    stages (the crossing of its model's escape observable, [`layout_phases`][]; ignored with two
    units or more, whose exit is the first stage).

    **Returns:** [`Phases`][]: plateau entry and exit, stages, excursions, final alignment.
    """
    t = np.asarray(t, dtype=np.float64)
    alpha = alignment(np.asarray(m), np.asarray(q))
    sep = pair_separation_times(t, alpha, threshold)
    stages = _stages(t, alpha, sep, threshold)
    exit_ = stages[0].time if stages else (escape if alpha.shape[1] < 2 else None)
    a = _running_median(np.linalg.norm(alpha.mean(axis=1), axis=-1), SMOOTH)
    ref_t = exit_ if exit_ is not None else float(t[-1])
    a_ref = float(np.interp(ref_t, t, a))
    entry: float | None
    if a_ref < threshold:
        entry = float(t[0])
    else:
        idx = np.nonzero(a >= ENTRY_FRACTION * a_ref)[0]
        entry = float(t[idx[0]]) if idx.size else None
        if entry is not None and exit_ is not None:
            entry = min(entry, exit_)
    spread_f = alpha.max(axis=1) - alpha.min(axis=1)                     # (T, F)
    feature_times = tuple(persistent_crossing(t, spread_f[:, f], threshold)
                          for f in range(alpha.shape[-1]))
    shortfalls = tuple(crossing_shortfall(spread_f[:, f], threshold)
                       for f in range(alpha.shape[-1]))
    return Phases(threshold=float(threshold), plateau_entry=entry, plateau_exit=exit_,
                  plateau_alignment=a_ref, stages=tuple(stages),
                  excursions=tuple(_reversals(t, alpha, threshold, stages)),
                  final_alignment=alpha[-1], separation_times=sep, feature_times=feature_times,
                  feature_shortfalls=shortfalls)


def layout_phases(t: np.ndarray, arrays: dict[str, np.ndarray], layout: Layout, *,
                  threshold: float = ESCAPE_THRESHOLD, observable=None) -> Phases:
    """[`detect_phases`][] of one run given by its named arrays (`(T, ...)`, as in `ode.npz`
    or one seed of `sgd.npz`), on the alignment arrays of `layout`; `observable` (the model's
    `escape_observable`) gives the plateau exit of a single unit, its
    [`headflow.dynamics.measures.escape_crossing`][] of θ."""
    a, g = layout.alignment
    escape = (None if observable is None
              else escape_crossing(t, np.asarray(observable(arrays)), threshold))
    return detect_phases(t, arrays[a], arrays[g], threshold=threshold, escape=escape)


def seed_summary(phases: list[Phases]) -> dict:
    """Aggregate over SGD seeds: plateau exit mean / SEM / count, the distribution of stage
    orders (as strings like `"1-2-3"`), and the per-stage mean times of the most common order."""
    exits = np.array([p.plateau_exit for p in phases if p.plateau_exit is not None])
    entries = np.array([p.plateau_entry for p in phases if p.plateau_entry is not None])
    orders = Counter("-".join(str(f + 1) for f in p.stage_order) or "none" for p in phases)
    forders = Counter("-".join(str(f + 1) for f in p.feature_order) or "none" for p in phases)
    ftimes = np.array([[np.nan if x is None else x for x in p.feature_times] for p in phases])
    n = len(exits)
    return {"seeds": len(phases), "escaped": int(n),
            "plateau_exit_mean": float(exits.mean()) if n else None,
            "plateau_exit_sem": float(exits.std(ddof=1) / np.sqrt(n)) if n > 1 else None,
            "plateau_entry_mean": float(entries.mean()) if entries.size else None,
            "stage_orders": dict(orders.most_common()),
            "stage_order": orders.most_common(1)[0][0] if phases else None,
            "feature_orders": dict(forders.most_common()),
            "feature_order": forders.most_common(1)[0][0] if phases else None,
            "feature_times_mean": [None if not np.isfinite(ftimes[:, f]).any()
                                   else float(np.nanmean(ftimes[:, f]))
                                   for f in range(ftimes.shape[1])] if phases else []}


def ode_trajectory(cfg, ov0, times, *, equivariant: bool, progress: bool = False) -> dict:
    """The manifold ODE from `ov0` (default: `[ode] init`) on `times` (float64), with its
    risk: `ode.npz` arrays. A model other than attention integrates its configured field
    ([`headflow.dynamics.ode.run_ode`][]; `equivariant` is about the attention field's nodes and
    does not apply)."""
    if cfg.model_kind != "attention":
        return run_ode(cfg, ov0, times, progress=progress).arrays()
    model = cfg.build_model()
    field = manifold_field(cfg, model, equivariant=equivariant)
    ov0 = initial_state(cfg, model) if ov0 is None else ov0
    ov0 = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), ov0.on_manifold())
    sol = integrate(field, ov0, times, Integrator.from_config(cfg.ode), progress=progress)
    risk, err = trajectory_risk(model, sol.overlaps, backend_of(cfg), manifold=True)
    arrays = sol.overlaps.arrays()
    return {"t": np.asarray(sol.t), "risk": np.asarray(risk), "risk_err": np.asarray(err),
            **{k: arrays[k] for k in ORDER_PARAMETERS}}


def censored_feature_times(ph: Phases, t_end: float) -> np.ndarray:
    """The feature times of `ph`, a feature never told apart counted at `t_end` (the end of the
    run): the quantity the stage-order verdict is judged on and its node check compares."""
    return np.array([float(t_end) if t is None else float(t) for t in ph.feature_times])


def variance_order(cfg) -> list[int] | None:
    """The features (0-based) in the order of decreasing prior variance `Var θ_f` (features of
    zero variance left out; ties keep their index order): the stage order the paper predicts.
    None for a model without a prior over features (the committee machine)."""
    if cfg.model_kind != "attention":
        return None
    var = np.asarray(cfg.build_prior().variance(), dtype=np.float64)
    return [int(f) for f in np.argsort(-var, kind="stable") if var[f] > 0]


def stage_order_verdict(ph: Phases, expected: list[int], t_end: float,
                        check: NodeChange | None, ph_fine: Phases | None = None) -> Claim:
    """"The features are told apart in the order `expected`" (decreasing `Var θ_f`) for one
    trajectory, `check` the node change of its censored feature times
    ([`censored_feature_times`][]) and `ph_fine` the phases of the rerun on 4× the nodes (the
    claim judged there too). Holds when `feature_order` is `expected`.

    - Every feature of `expected` told apart by `t_end`: the margin is the smallest gap between
      the times of consecutive features of `expected`, against the change of those times.
    - A feature of `expected` not told apart by `t_end` (the claim fails within the run): the
      margin is how far its head spread stays below θ ([`crossing_shortfall`][]), against the
      change of that shortfall on 4× the nodes (the feature least close to crossing; a feature
      told apart on 4× the nodes is a change of the whole shortfall). Its censored time says
      nothing about how far it is from crossing.
    """
    times = censored_feature_times(ph, t_end)
    order = "-".join(str(f + 1) for f in expected)
    numbers = {"feature_order": [f + 1 for f in ph.feature_order],
               "feature_order_fine": None if ph_fine is None
               else [f + 1 for f in ph_fine.feature_order],
               "feature_times": list(ph.feature_times),
               "feature_times_fine": None if ph_fine is None else list(ph_fine.feature_times),
               "t_end": float(t_end)}
    checks: list[NodeChange] = [] if check is None else [check]
    missing = [f for f in expected if ph.feature_times[f] is None]
    if missing and ph.feature_shortfalls:
        f = max(missing, key=lambda k: ph.feature_shortfalls[k])
        margin = float(ph.feature_shortfalls[f])
        fine = None if ph_fine is None or not ph_fine.feature_shortfalls \
            else float(ph_fine.feature_shortfalls[f])
        numbers.update(shortfall_feature=f + 1, shortfall=margin, shortfall_fine=fine,
                       threshold=float(ph.threshold))
        if check is not None:
            checks = [dataclasses.replace(
                check, quantity=f"shortfall of the head spread along feature {f + 1} below θ",
                value=margin, value_fine=fine)]
    else:
        gaps = [times[b] - times[a] for a, b in zip(expected, expected[1:])]
        margin = float(np.min(np.abs(gaps))) if gaps else float("inf")
    return judge(f"features told apart in the order {order} (decreasing Var θ_f)",
                 ph.feature_order == expected, margin, checks,
                 holds_fine=None if ph_fine is None else ph_fine.feature_order == expected,
                 numbers=numbers)


def ode_phases_checked(cfg, ov0, times, *, equivariant: bool, threshold: float,
                       progress: bool = False) -> tuple[dict, Phases, Claim | None]:
    """The ODE trajectory of [`ode_trajectory`][], its phases, and the stage-order verdict with
    its node check: the whole run (the stages form along it, so the segment starts at `t_0`)
    rerun on 4× the nodes ([`headflow.dynamics.ode.node_change`][]). No verdict (None) for a model
    without a prior variance or an ODE without nodes."""
    model = cfg.build_model()
    layout, observable = model.layout, model.escape_observable
    arrays = ode_trajectory(cfg, ov0, times, equivariant=equivariant, progress=progress)
    ph = layout_phases(arrays["t"], arrays, layout, threshold=threshold, observable=observable)
    expected = variance_order(cfg)
    t_end = float(arrays["t"][-1])
    if expected is None or node_count(cfg) is None:
        return arrays, ph, None
    finer: list[Phases] = []

    def rerun(c, start, t0: float, t1: float) -> np.ndarray:
        a = ode_trajectory(c, start, times, equivariant=equivariant)
        finer.append(layout_phases(a["t"], a, layout, threshold=threshold,
                                   observable=observable))
        return censored_feature_times(finer[-1], t_end)

    check = node_change(rerun, cfg, ov0, float(times[0]), t_end,
                        censored_feature_times(ph, t_end),
                        quantity="feature times (censored at the end of the run)")
    return arrays, ph, stage_order_verdict(ph, expected, t_end, check, finer[0])
