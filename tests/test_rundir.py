"""The result folders' clean-up after an interrupt (`headflow.validation._rundir`): a forced
exit (`discard_active`, called by the command line's main thread while the run's own thread
may still be cleaning up or writing) leaves neither the temporary folder nor the parent folders
the run created.

`tests/test_cli_robustness.py::test_interrupt_stops_cleanly` sends real signals to real runs;
the races below are made deterministic here."""

from __future__ import annotations

import pytest

from headflow.dynamics import HeadflowError
from headflow.validation import _rundir


class _Interrupt(Exception):
    """Stands for the run's unwinding after a stop request."""


def test_a_forced_exit_during_the_runs_own_clean_up_still_removes_everything(tmp_path,
                                                                             monkeypatch):
    """The run's thread unwinds (an interrupt) and is stopped in the middle of removing its
    temporary folder: the folder is still registered then, so the forced exit removes it and
    the parents."""
    out = tmp_path / "a" / "b" / "res"
    seen = []
    real_rmtree = _rundir.shutil.rmtree

    def interrupted_rmtree(path, ignore_errors=False):
        if not seen:                              # the run's own call, not discard_active's
            seen.append(path in _rundir._ACTIVE)
            _rundir.discard_active()              # what the main thread does at the deadline
        real_rmtree(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(_rundir.shutil, "rmtree", interrupted_rmtree)
    with pytest.raises(_Interrupt), _rundir.run_dir(out, command="test") as run:
        run.path("x.npz").write_bytes(b"partial")
        raise _Interrupt
    assert seen[0] is True
    assert not (tmp_path / "a").exists() and _rundir._ACTIVE == {}


def test_a_forced_exit_while_the_run_still_writes_removes_everything(tmp_path, monkeypatch):
    """The run's thread writes a file (a figure, say) into its temporary folder just after the
    forced exit removed the folder's contents: the folder is removed again until it stays gone,
    then the parents."""
    out = tmp_path / "a" / "b" / "res"
    real_rmtree = _rundir.shutil.rmtree
    calls = []

    def rmtree_then_a_late_write(path, ignore_errors=False):
        real_rmtree(path, ignore_errors=ignore_errors)
        calls.append(path)
        if len(calls) == 1:                      # the run's thread, between two removals
            path.mkdir()
            (path / "late.png").write_bytes(b"x")

    with pytest.raises(HeadflowError, match="cannot write results"), \
            _rundir.run_dir(out, command="test") as run:
        run.path("x.npz").write_bytes(b"partial")
        monkeypatch.setattr(_rundir.shutil, "rmtree", rmtree_then_a_late_write)
        _rundir.discard_active()                 # what the main thread does at the deadline
        monkeypatch.undo()
        assert len(calls) == 2 and not run.tmp.exists()
        assert not (tmp_path / "a").exists() and _rundir._ACTIVE == {}
    # the run's own exit then fails to write into a folder that is gone (one line), and still
    # nothing is left
    assert not (tmp_path / "a").exists() and _rundir._ACTIVE == {}
