"""The caches between runs (`headflow.validation._cache`): JAX's persistent compilation cache and
the generated symbolic code, in `$HEADFLOW_CACHE_DIR`; a repeated run reads them and gives the same
results; `--no-cache` and `HEADFLOW_CACHE=0` write nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _util import FAST_COMPILE_ENV, ROOT

TINY = ["--set", "training.t_max=0.5", "--set", "output.n_save=3", "--set", "ode.samples=256",
        "--set", "model.L=2", "--set", "model.H=1", "--set", "model.F=1", "--set",
        "ode.rhs=symbolic"]
COMMITTEE = ["--set", 'model.kind="committee"', "--set", "training.t_max=0.5", "--set",
             "output.n_save=3"]


def _ode(out: Path, cache: Path, *before: str, enabled: bool = True,
         after: tuple[str, ...] = (), sets: list[str] = TINY, env: dict | None = None) -> dict:
    """`headflow [BEFORE] ode SETS --out OUT` in a subprocess with the cache in `cache`, at XLA
    -O0 (`FAST_COMPILE_ENV`: what is checked is which programs are cached, written and read back,
    not how fast they run)."""
    env = {**os.environ, **FAST_COMPILE_ENV, "PYTHONPATH": str(ROOT),
           "HEADFLOW_CACHE_DIR": str(cache), "HEADFLOW_CACHE": "1" if enabled else "0",
           **(env or {})}
    done = subprocess.run([sys.executable, "-m", "headflow.validation", *before, "ode", *sets,
                           *after,
                           "--out", str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((out / "meta.json").read_text())


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


@pytest.mark.slow
def test_repeated_run_uses_the_cache(tmp_path):
    cache = tmp_path / "cache"
    cold = _ode(tmp_path / "a", cache)["wall_s"]
    jax_entries = _files(cache / "jax")
    assert jax_entries, "no compiled program was cached"
    assert _files(cache / "symbolic"), "the generated symbolic code was not cached"
    assert _files(cache / "nodes"), "the quasi-Monte Carlo nodes were not cached"
    # the same experiment through another command line (the results cache keys on the
    # arguments, so this one is computed, from the cached programs)
    warm = _ode(tmp_path / "b", cache, after=("--set", "ode.seed=0"))["wall_s"]
    with np.load(tmp_path / "a" / "ode.npz") as a, np.load(tmp_path / "b" / "ode.npz") as b:
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    # the second run found every cached program (none was compiled and written again; every
    # program is written, `MIN_COMPILE_S` = 0). The tolerance allows for a program whose
    # lowering differs between the two command lines
    again = _files(cache / "jax")
    assert set(jax_entries) <= set(again)
    assert len(again) - len(jax_entries) <= len(jax_entries) // 4, again
    # meta.json's phases (headflow.validation._phases) say so: the cold run read nothing back
    # from the empty cache, the warm one read its programs back, faster than compiling them
    _check_phases(cold)
    _check_phases(warm)
    assert cold["cache_load"] == 0 < warm["cache_load"]
    assert warm["compile"] < cold["compile"] / 2, (cold, warm)


def _check_phases(wall: dict) -> None:
    """The phases of a fresh `headflow ode`: every one present and non-negative; the blocks that
    follow each other add up to at most the total, the ODE's parts to at most its block, and
    JAX's phases to at most the total."""
    parts = ("imports", "setup", "ode", "write", "figure")
    ode = ("ode.build", "ode.compile", "ode.integrate", "ode.risk", "ode.field_error")
    jax = ("trace", "lower", "compile", "cache_load")
    assert set(parts + ode + jax + ("total",)) <= wall.keys(), sorted(wall)
    assert all(wall[k] >= 0 for k in wall), wall
    assert sum(wall[k] for k in parts) <= wall["total"] + 1e-3, wall
    assert sum(wall[k] for k in ode) <= wall["ode"] + 1e-3, wall
    assert wall["trace"] + wall["lower"] + wall["compile"] <= wall["total"] + 1e-3, wall
    assert wall["cache_load"] <= wall["compile"] + 1e-3, wall
    assert wall["imports"] > 0.1                   # importing JAX alone takes longer


@pytest.mark.slow
def test_cache_off_writes_nothing(tmp_path):
    """`--no-cache` on the symbolic run (which would write all three caches: compiled programs,
    generated code, results) and `HEADFLOW_CACHE=0` on a committee run (compiled programs and
    results; both switches turn the generated code's cache off in the same function) leave
    their cache folders empty."""
    _ode(tmp_path / "a", tmp_path / "c1", "--no-cache")
    _ode(tmp_path / "b", tmp_path / "c2", enabled=False, sets=COMMITTEE)
    assert _files(tmp_path / "c1") == [] and _files(tmp_path / "c2") == []


# Runs `headflow ode` as `python -m headflow.validation` does (the module's `__main__`, the same
# modules loaded as by `_ode`) and reports (JSON, last line) its exit status and which heavy
# modules the process imported.
_REPLAY_PROBE = r"""
import json, runpy, sys
try:
    runpy.run_module("headflow.validation", run_name="__main__", alter_sys=True)
except SystemExit as stop:
    code = stop.code
heavy = ("jax", "sympy", "scipy", "diffrax", "equinox", "matplotlib", "headflow.dynamics",
         "headflow.sims")
print(json.dumps({"code": code, "imported": [m for m in heavy if m in sys.modules]}))
"""


def _probe(out: Path, cache: Path, *extra: str) -> dict:
    env = {**os.environ, **FAST_COMPILE_ENV, "PYTHONPATH": str(ROOT),
           "HEADFLOW_CACHE_DIR": str(cache)}
    env.pop("HEADFLOW_CACHE", None)
    done = subprocess.run([sys.executable, "-c", _REPLAY_PROBE, "ode", *COMMITTEE, *extra, "--out",
                           str(out), "--json"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    return {**json.loads(lines[-1]), "summary": json.loads(lines[-2])}


NOISY = ("--set", "model.noise=0.1")
"""Label noise: a value of the field's traced noise (without noise the program is another)."""


@pytest.fixture(scope="module")
def committee_cold(tmp_path_factory) -> tuple[Path, Path, dict]:
    """A short committee `ode` through `_probe` in an empty cache: the cache folder it filled,
    its output folder and the probe's report. Tests copy the cache before running more."""
    root = tmp_path_factory.mktemp("committee_cold")
    first = _probe(root / "out", root / "cache", *NOISY)
    return root / "cache", root / "out", first


def test_repeated_ode_is_replayed_without_jax(tmp_path, committee_cold):
    """A repeated identical `ode` copies the stored result folder (same arrays, `meta.json`
    marking the copy) without importing JAX, sympy, diffrax, matplotlib or the theory; a
    changed input, `--no-cache` or an `--out` that is refused runs (or fails) in full."""
    cold, a, first = committee_cold
    cache = shutil.copytree(cold, tmp_path / "cache")
    assert first["code"] == 0 and "jax" in first["imported"]
    again = _probe(tmp_path / "b", cache, *NOISY)
    assert again["code"] == 0 and again["imported"] == [], again
    assert again["summary"] == {**first["summary"], "out": str(tmp_path / "b")}
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == sorted(
        p.name for p in a.iterdir())
    with np.load(a / "ode.npz") as x, np.load(tmp_path / "b" / "ode.npz") as y:
        for name in x:
            np.testing.assert_array_equal(x[name], y[name], err_msg=name)
    meta = json.loads((tmp_path / "b" / "meta.json").read_text())
    assert "replayed" in meta and "replayed" not in json.loads((a / "meta.json").read_text())
    # another input: computed (with the compiled programs cached)
    other = _probe(tmp_path / "c", cache, *NOISY, "--set", "training.t_max=0.25")
    assert "jax" in other["imported"]
    # an existing folder without --force: the full run refuses it, one line, exit 2
    done = subprocess.run([sys.executable, "-m", "headflow.validation", "ode", *COMMITTEE, *NOISY,
                           "--out", str(tmp_path / "b")], capture_output=True, text=True,
                          timeout=600, env={**os.environ, **FAST_COMPILE_ENV,
                                            "PYTHONPATH": str(ROOT),
                                            "HEADFLOW_CACHE_DIR": str(cache)})
    assert done.returncode == 2 and done.stderr.startswith("headflow: error: ")


@pytest.mark.slow
def test_exported_solve_is_loaded_by_the_next_process(tmp_path, committee_cold):
    """The ODE run's programs (the solve, the risk and the field's error along it) are exported
    once (`headflow.dynamics.set_export_cache`): a run with other values of the same problem
    loads them (no stored file is written again) and gives the arrays of a run that traces the
    programs (`EQX_ON_ERROR=raise`, under which programs are not exported), exactly; damaged
    stored files are exported again. (Another structure is another program under another key:
    `test_program_key_follows_structure_not_values` below.)"""
    # one run in an empty cache; copy2 keeps the stored files' times
    cache = shutil.copytree(committee_cold[0], tmp_path / "cache")
    store = cache / "exported"
    stored = _files(store)
    assert len(stored) == 3
    stamps = [f.stat().st_mtime_ns for f in stored]
    _ode(tmp_path / "b", cache, sets=COMMITTEE, after=("--set", "model.noise=0.2"))
    assert _files(store) == stored and [f.stat().st_mtime_ns for f in stored] == stamps  # loaded
    _ode(tmp_path / "c", tmp_path / "traced", sets=COMMITTEE,
         after=("--set", "model.noise=0.2"), env={"EQX_ON_ERROR": "raise"})
    assert _files(tmp_path / "traced" / "exported") == []
    with np.load(tmp_path / "b" / "ode.npz") as b, np.load(tmp_path / "c" / "ode.npz") as c:
        assert sorted(b.files) == sorted(c.files)
        for name in b.files:
            np.testing.assert_array_equal(b[name], c[name], err_msg=name)
    for f in stored:
        f.write_bytes(b"damaged")
    _ode(tmp_path / "d", cache, sets=COMMITTEE, after=("--set", "model.noise=0.3"))
    assert _files(store) == stored and all(f.read_bytes() != b"damaged" for f in stored)


def test_program_key_follows_structure_not_values():
    """Fields that differ only in values (η, σ: traced) share a key; another function, another
    static setting (`max_steps`), another activation or another shape does not."""
    import jax.numpy as jnp

    from headflow.dynamics import load_config
    from headflow.dynamics._exported import program_key
    from headflow.dynamics.ode import Integrator, build_field, traced_values
    from headflow.dynamics.ode._integrate import _solve_from
    from headflow.dynamics.ode._run import _sizes_and_errors

    def key(sets, fn=_solve_from, **integrator):
        cfg = load_config(None, ['model.kind="committee"', *sets])
        integ = Integrator.from_config(cfg.ode, **integrator)
        return program_key(fn, (traced_values(build_field(cfg)), jnp.zeros(3), integ))

    base = key([])
    assert key(["training.lr=0.3", "model.noise=0.2"]) == base
    assert key([], fn=_sizes_and_errors) != base             # another function
    assert key([], max_steps=1234) != base
    assert key(['model.activation="relu"']) != base
    assert key(["model.K=3"]) != base


def test_node_sets_are_stored_and_read_back_exactly(tmp_path, monkeypatch):
    """A quasi-Monte Carlo node set is drawn once and then read from the node cache
    (`headflow.dynamics.set_node_cache`), bit for bit the drawn one; other arguments are other
    files; a damaged file or one of another shape is drawn and written again."""
    from headflow.dynamics import set_node_cache
    from headflow.dynamics._node_cache import node_cache
    from headflow.dynamics.expectations import QuasiMonteCarlo

    session = node_cache()
    try:
        set_node_cache(None)
        drawn = np.asarray(QuasiMonteCarlo(samples=256, seed=3).nodes(5).x)
        set_node_cache(tmp_path)
        first = np.asarray(QuasiMonteCarlo(samples=256, seed=3).nodes(5).x)
        (stored,) = _files(tmp_path)
        np.testing.assert_array_equal(first, drawn)
        with monkeypatch.context() as m:               # read back, not drawn
            m.setattr(QuasiMonteCarlo, "_draw", lambda self, dim: pytest.fail("drawn again"))
            np.testing.assert_array_equal(QuasiMonteCarlo(samples=256, seed=3).nodes(5).x,
                                          drawn)
        for other in (QuasiMonteCarlo(samples=256, seed=4), QuasiMonteCarlo(samples=512, seed=3)):
            other.nodes(5)
        QuasiMonteCarlo(samples=256, seed=3).nodes(6)
        assert len(_files(tmp_path)) == 4
        for damage in (b"damaged", None):
            if damage is None:
                np.save(stored, drawn[:7])                 # a readable array of another shape
            else:
                stored.write_bytes(damage)
            np.testing.assert_array_equal(QuasiMonteCarlo(samples=256, seed=3).nodes(5).x,
                                          drawn)
            np.testing.assert_array_equal(np.load(stored), drawn)
    finally:
        set_node_cache(session)


_NODES_PROBE = r"""
import sys
from headflow.dynamics import set_node_cache
from headflow.dynamics.expectations import QuasiMonteCarlo
set_node_cache(sys.argv[1])
x = QuasiMonteCarlo(samples=256, seed=3).nodes(5).x
print(repr(float(x.sum())), "scipy.stats" in sys.modules)
"""


def test_stored_nodes_spare_the_scipy_stats_import(tmp_path):
    """A fresh process whose node set is stored reads it without importing `scipy.stats`; the
    process that drew it had to."""
    runs = [subprocess.run([sys.executable, "-c", _NODES_PROBE, str(tmp_path)],
                           capture_output=True, text=True, timeout=300) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-2000:]
    (drew_sum, drew), (read_sum, read) = (r.stdout.split() for r in runs)
    assert (drew, read) == ("True", "False") and read_sum == drew_sum
