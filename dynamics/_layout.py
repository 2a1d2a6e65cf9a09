"""How a model's named order parameters are laid out, for the analyses that compare runs
(`headflow compare`): which names to compare, which axes index the exchangeable student units,
and which two arrays define the alignment of the units with the teacher's directions
([`headflow.dynamics.measures.alignment`][]), hence the escape from the unspecialized plateau."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Layout:
    """**Fields:** `names` (the order parameters compared, in order), `per_unit` (arrays whose
    first axis after the run and time axes indexes the student units), `unit_by_unit` (arrays
    with two such axes), `alignment` (`(overlaps with the teacher's directions (units ×
    directions), the students' Gram matrix (units × units))`), `cross` (arrays that vanish on an
    invariant manifold, reported as a check; may be empty)."""

    names: tuple[str, ...]
    per_unit: tuple[str, ...]
    unit_by_unit: tuple[str, ...]
    alignment: tuple[str, str]
    cross: tuple[str, ...] = ()


ATTENTION = Layout(names=("m", "q", "n", "s", "b"), per_unit=("m", "n", "b", "kvs", "vks"),
                   unit_by_unit=("q", "s", "kv"), alignment=("m", "q"),
                   cross=("kv", "kvs", "vks"))
"""The attention model: heads are the units, `m` and `q` their alignment."""
