"""Runs across processes (`headflow --coordinator … --num-processes N --process-id I`).

Two local processes, each with two forced CPU devices and gloo collectives between them, give
the arrays of a one-process, one-device run, and only process 0 writes anything. Nothing here is
skipped: without working gloo collectives the processes fail and so do the tests.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _util import FAST_COMPILE_ENV

from headflow.dynamics.distributed import DistributedError, DistributedSettings

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 900.0
"""For a whole group of processes (about a minute each on two idle cores)."""

# the drivers split points and seeds over processes whatever the model: the runs are of a small
# committee (a linear one for the sweep, whose ODE diverges at a large η), which compiles in a
# fraction of the attention model's time
SWEEP_SETS = ['model.kind="committee"', 'model.activation="linear"', "training.t_max=2.0",
              "output.n_save=5"]
SGD_SETS = ['model.kind="committee"', "sim.dim=60", "sim.seeds=3", "training.t_max=1.0",
            "output.n_save=5"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(devices: int | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HEADFLOW_", "JAX_", "XLA_", "SLURM_", "OMPI_"))}
    # tiny runs: compiling dominates, so every process (the reference too) compiles at -O0
    env.update(FAST_COMPILE_ENV, JAX_PLATFORMS="cpu", HEADFLOW_CACHE="0",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])))
    if devices is not None:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    return env


def _launch(runs: list[tuple[list[str], Path, dict[str, str]]]) -> list[tuple[int, str, str]]:
    """Start every `(argv, cwd, env)` of `runs` at once (`python -m headflow.validation ARGV` in
    `cwd`), wait for all of them (at most `TIMEOUT_S` in all), and return `(status, stdout, stderr)`
    of each. On a timeout or any error every process still running is killed."""
    procs = []
    files = []
    try:
        for k, (argv, cwd, env) in enumerate(runs):
            cwd.mkdir(parents=True, exist_ok=True)
            out = open(cwd.parent / f"proc{k}.out", "w+")  # noqa: SIM115 - closed below
            err = open(cwd.parent / f"proc{k}.err", "w+")  # noqa: SIM115
            files.append((out, err))
            procs.append(subprocess.Popen([sys.executable, "-m", "headflow.validation", *argv],
                                          cwd=cwd,
                                          env=env, stdout=out, stderr=err))
        deadline = time.monotonic() + TIMEOUT_S
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        results = []
        for p, (out, err) in zip(procs, files):
            out.seek(0)
            err.seek(0)
            results.append((p.returncode, out.read(), err.read()))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for out, err in files:
            out.close()
            err.close()


def _sets(items: list[str]) -> list[str]:
    return [a for s in items for a in ("--set", s)]


def _run_both(tmp_path: Path, command: list[str]) -> tuple[Path, Path, list]:
    """`command` once by two processes of two CPU devices each and once by one process of one
    device, at the same time; returns the two output folders and the results of the three
    processes (the two distributed ones first)."""
    port = _free_port()
    dist_out, ref_out = tmp_path / "dist" / "out", tmp_path / "ref" / "out"
    runs = []
    for i in range(2):
        tmp = tmp_path / f"tmp{i}"        # where process 1 writes its throw-away run folder
        tmp.mkdir()
        runs.append((["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
                      "--process-id", str(i), *command, "--out", str(dist_out), "--json"],
                     tmp_path / f"cwd{i}", {**_env(2), "TMPDIR": str(tmp)}))
    runs.append(([*command, "--out", str(ref_out), "--json"], tmp_path / "cwd_ref", _env(None)))
    results = _launch(runs)
    for k, (code, _, err) in enumerate(results):
        assert code == 0, f"process {k} exited with {code}:\n{err[-4000:]}"
    return dist_out, ref_out, results


def _check_only_process_0_wrote(tmp_path: Path, dist_out: Path, results) -> None:
    for k in range(2):
        assert not any((tmp_path / f"cwd{k}").iterdir()), f"process {k} wrote in its folder"
        left = [p.name for p in (tmp_path / f"tmp{k}").iterdir() if p.name.startswith(".out.")]
        assert not left, f"process {k} left {left}"
    assert sorted(p.name for p in dist_out.parent.iterdir()) == ["out"]  # no temporaries left
    meta = json.loads((dist_out / "meta.json").read_text())
    assert meta["processes"] == 2 and len(meta["devices"]) == 4, meta
    summary0 = json.loads(results[0][1].strip().splitlines()[-1])
    assert summary0["out"] == str(dist_out)
    # process 1 prints no summary (gloo's own connection lines, from several threads, may be
    # interleaved on its stdout: only the absence of headflow's output is checked)
    assert "{" not in results[1][1] and "sweep:" not in results[1][1], results[1][1]


@pytest.mark.slow
def test_two_processes_sweep_equals_one_process(tmp_path):
    """A 3 × 2 grid (6 points, padded to 8 on the 4 devices; the two at η = 60 diverge): every array
    of `sweep.npz` equals the one-process, one-device run to float64 round-off (measured: bit
    for bit here, which is not guaranteed, since XLA may vectorize a batch of another size
    differently), statuses and phases exactly."""
    command = ["sweep", *_sets(SWEEP_SETS), "--grid", "training.lr=0.5,1.0,60.0", "--grid",
               "model.noise=0.0,0.3"]
    dist_out, ref_out, results = _run_both(tmp_path, command)
    _check_only_process_0_wrote(tmp_path, dist_out, results)
    dist, ref = np.load(dist_out / "sweep.npz"), np.load(ref_out / "sweep.npz")
    assert sorted(dist.files) == sorted(ref.files)
    assert list(ref["status"]) == [0, 0, 0, 0, 1, 1]       # the lr = 60 points diverge
    for name in ref.files:
        if ref[name].dtype.kind == "f":
            np.testing.assert_allclose(dist[name], ref[name], rtol=1e-12, atol=1e-13,
                                       err_msg=name)
        else:
            np.testing.assert_array_equal(dist[name], ref[name], err_msg=name)
    for name in ("sweep.json", "sweep.png", "phase_diagram.png", "config.toml"):
        assert (dist_out / name).is_file(), name


@pytest.mark.slow
@pytest.mark.parametrize("space", ["weights", "overlaps"])
def test_two_processes_sgd_seeds_equal_one_process(tmp_path, space):
    """Three SGD seeds (padded to 4) over two processes, in weight space (float32) and in
    overlap space (float64): `sgd.npz` equals the one-process run to round-off (measured: at
    most 1.1e-7 in weight space, 2.2e-16 in overlap space)."""
    command = ["sgd", *_sets([*SGD_SETS, f'sim.space="{space}"'])]
    dist_out, ref_out, results = _run_both(tmp_path, command)
    _check_only_process_0_wrote(tmp_path, dist_out, results)
    dist, ref = np.load(dist_out / "sgd.npz"), np.load(ref_out / "sgd.npz")
    assert sorted(dist.files) == sorted(ref.files) and ref["risk"].shape[0] == 3
    for name in ref.files:
        np.testing.assert_allclose(dist[name], ref[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_two_processes_refuse_a_used_output_folder_together(tmp_path):
    """Process 0 alone judges the output folder (it writes it); when it refuses a non-empty
    one, both processes stop with a one-line error and exit status 2 before computing."""
    out = tmp_path / "used"
    out.mkdir()
    (out / "keep.txt").write_text("earlier results")
    port = _free_port()
    results = _launch([(["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
                         "--process-id", str(i), "sgd", *_sets(SGD_SETS), "--out", str(out)],
                        tmp_path / f"cwd{i}", _env(2)) for i in range(2)])
    for k, (code, _, err) in enumerate(results):
        lines = [x for x in err.splitlines() if not x.startswith("[Gloo]") and x.strip()]
        assert code == 2 and len(lines) == 1, (k, code, err[-3000:])
        assert lines[0].startswith(f"headflow: error: --out {out}: ")
    assert "exists and is not empty" in results[0][2]
    assert "refused by process 0" in results[1][2]
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


# -- settings ---------------------------------------------------------------------------------

def test_settings_from_flags_and_environment():
    env = {"HEADFLOW_COORDINATOR": "node01:1234", "HEADFLOW_NUM_PROCESSES": "4",
           "HEADFLOW_PROCESS_ID": "3"}
    assert DistributedSettings.resolve(environ={}) is None
    assert DistributedSettings.resolve(environ={"HEADFLOW_DISTRIBUTED": "0"}) is None
    # on without values: everything left to JAX's cluster detection (SLURM, Open MPI)
    assert DistributedSettings.resolve(environ={"HEADFLOW_DISTRIBUTED": "1"}) == \
        DistributedSettings()
    assert DistributedSettings.resolve(enabled=True, environ={}) == DistributedSettings()
    assert DistributedSettings.resolve(environ=env) == DistributedSettings("node01:1234", 4, 3)
    # a flag wins over its variable; any value turns the mode on
    assert DistributedSettings.resolve(process_id="1", environ=env) == \
        DistributedSettings("node01:1234", 4, 1)
    assert DistributedSettings.resolve(coordinator="[::1]:80", environ={}) == \
        DistributedSettings("[::1]:80", None, None)
    with pytest.raises(DistributedError, match="HEADFLOW_COORDINATOR='a:b:1'"):
        DistributedSettings.resolve(environ={"HEADFLOW_COORDINATOR": "a:b:1"})
    with pytest.raises(DistributedError, match="HEADFLOW_NUM_PROCESSES='1.5'"):
        DistributedSettings.resolve(enabled=True, environ={"HEADFLOW_NUM_PROCESSES": "1.5"})


@pytest.mark.parametrize("argv, message", [
    (["--coordinator", "node01", "--num-processes", "2", "--process-id", "0"],
     "--coordinator 'node01': expected HOST:PORT"),
    (["--coordinator", "node01:70000"], "port in 1..65535"),
    (["--num-processes", "0"], "--num-processes '0': expected an integer >= 1"),
    (["--num-processes", "two"], "--num-processes 'two': expected an integer >= 1"),
    (["--num-processes", "2", "--process-id", "2"],
     "--process-id '2': must be below the number of processes (--num-processes '2')"),
    (["--process-id", "-1"], "--process-id '-1': expected an integer >= 0"),
])
def test_bad_settings_are_one_line_errors(argv, message, tmp_path, capsys, monkeypatch):
    from headflow.validation.cli import main

    for var in ("HEADFLOW_DISTRIBUTED", "HEADFLOW_COORDINATOR", "HEADFLOW_NUM_PROCESSES",
                "HEADFLOW_PROCESS_ID"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "out"
    assert main([*argv, "sweep", "--grid", "training.lr=1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("headflow: error: ") and message in err[0], err
    assert not out.exists()


def test_bad_environment_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    from headflow.validation.cli import main

    monkeypatch.setenv("HEADFLOW_DISTRIBUTED", "maybe")
    assert main(["sweep", "--grid", "training.lr=1", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip() == \
        "headflow: error: HEADFLOW_DISTRIBUTED='maybe': expected 1 or 0"
    monkeypatch.setenv("HEADFLOW_DISTRIBUTED", "1")
    monkeypatch.setenv("HEADFLOW_NUM_PROCESSES", "2")
    monkeypatch.setenv("HEADFLOW_PROCESS_ID", "5")
    assert main(["sweep", "--grid", "training.lr=1", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip() == (
        "headflow: error: HEADFLOW_PROCESS_ID='5': must be below the number of processes "
        "(HEADFLOW_NUM_PROCESSES='2')")


def test_no_cluster_is_a_one_line_error():
    """`--distributed` outside any cluster JAX recognizes names the missing settings (in a
    fresh process: `jax.distributed` must start before any JAX computation)."""
    env = _env(None)
    proc = subprocess.run([sys.executable, "-m", "headflow.validation", "--distributed", "sweep",
                           "--grid", "training.lr=1", "--check"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("headflow: error: --distributed: no cluster "
                                               "detected"), err
    for flag in ("--coordinator", "--num-processes", "--process-id"):
        assert flag in err[0]


def test_per_device_batch():
    """The batch one device sees after `shard_batch` pads `n` items to a multiple of the
    device count."""
    import jax

    from headflow.dynamics.sharding import padded_size, per_device

    assert [per_device(n, 2) for n in (0, 1, 2, 7, 8, 9)] == [1, 1, 1, 4, 4, 5]
    assert [padded_size(n, 3) for n in (1, 3, 4)] == [3, 3, 6]
    assert per_device(5) == -(-5 // jax.device_count())
