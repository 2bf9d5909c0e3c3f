"""Multi-process federations on jax.distributed: 2 local processes x 2 fake CPU devices each (gloo
collectives over loopback), agent axis sharded over all 4 devices (tabular FedRQ with K = 4 and 8,
FedRDQN with K = 8), give the single-process vmap run's curves and final metrics for the same seed,
to float32 rounding (gloo sums in another order). Each test bounds its own time and kills its
processes whatever happens."""

import json
import os
import socket
import subprocess
import sys

import chex
import jax
import numpy as np
import pytest

from fedjax_rl.training import checkpoint, distributed, loop, run_directory

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import multiprocess_worker as worker  # noqa: E402

NUM_PROCESSES = 2
DEVICES_PER_PROCESS = 2
TIMEOUT_S = 420  # compilation dominates: one tiny FedRDQN config takes ~100 s per process pair on 2 shared cores
TABULAR_RTOL, TABULAR_ATOL = 1e-6, 2e-4
DQN_RTOL, DQN_ATOL = 1e-6, 1e-6  # compilation dominates: ~40 s per DQN config per process on 2 shared cores


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_processes(what: str, tmp_path, reference) -> tuple[list[dict], dict]:
    """Start the process group, compute `reference()` here while it runs, wait (bounded); returns
    each process's gathered arrays and the reference."""
    port = _free_port()
    # The suite's code-generation flags (tests/conftest.py), with this layout's device count.
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    flags.append(f"--xla_force_host_platform_device_count={DEVICES_PER_PROCESS}")
    env = {**os.environ, "XLA_FLAGS": " ".join(flags),
           "JAX_PLATFORMS": "cpu", "PYTHONPATH": os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")])}
    outs = [tmp_path / f"process{i}.npz" for i in range(NUM_PROCESSES)]
    logs = [open(tmp_path / f"process{i}.log", "w") for i in range(NUM_PROCESSES)]
    procs = []
    try:
        for i in range(NUM_PROCESSES):
            procs.append(subprocess.Popen(
                [sys.executable, os.path.join(HERE, "multiprocess_worker.py"), str(port), str(NUM_PROCESSES), str(i),
                 str(outs[i]), str(tmp_path / "runs"), what],
                env=env, stdout=logs[i], stderr=subprocess.STDOUT))
        single = reference()
        for proc in procs:
            proc.wait(timeout=TIMEOUT_S)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()
    for i, proc in enumerate(procs):
        assert proc.returncode == 0, f"process {i} failed:\n{(tmp_path / f'process{i}.log').read_text()[-3000:]}"
    results = []
    for out in outs:
        with np.load(out) as data:
            results.append(dict(data))
    return results, single


def _assert_close(multi: dict, single: dict, rtol: float, atol: float) -> None:
    assert sorted(multi) == sorted(single)
    worst = {}
    for name in single:
        a, b = np.asarray(multi[name], np.float64), np.asarray(single[name], np.float64)
        worst[name] = float(np.max(np.abs(a - b) / (atol + rtol * np.abs(b)), initial=0.0))
    print("max |multi - single| / (atol + rtol |single|):", max(worst.values()), max(worst, key=worst.get))
    for name in single:
        np.testing.assert_allclose(multi[name], np.asarray(single[name]), rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.deployment
def test_tabular_fedrq_on_two_processes_equals_single_process_vmap(tmp_path):
    def reference():
        return {name: np.asarray(v) for k in worker.TABULAR_AGENTS for name, v in worker.run_tabular(k, None).items()}

    results, single = _run_processes("tabular", tmp_path, reference)
    # Process 0's coordinator, named on loopback, listens there alone (JAX's default is every interface).
    assert [list(multi.pop("coordinator/listens_on")) for multi in results] == [["127.0.0.1"], []]
    for multi in results:  # every process holds the gathered global result
        assert "set num_devices to 4" in str(multi.pop("refused/num_devices"))
        _assert_close(multi, single, rtol=TABULAR_RTOL, atol=TABULAR_ATOL)


@pytest.mark.deployment
def test_fedrdqn_on_two_processes_equals_single_process_vmap(tmp_path):
    def reference():
        return {name: np.asarray(v) for k in worker.DQN_AGENTS for name, v in worker.run_dqn(k, None).items()}

    results, single = _run_processes("dqn", tmp_path, reference)
    for multi in results:
        resumed = {name[len("resumed/"):]: multi.pop(name) for name in list(multi) if name.startswith("resumed/")}
        _assert_close(multi, single, rtol=DQN_RTOL, atol=DQN_ATOL)
        chex.assert_trees_all_equal(resumed, multi)  # the resumed run restored exactly what was saved
    # Process 0 alone wrote the run directory, from the gathered values, with the layout recorded.
    run_dir = tmp_path / "runs" / f"dqn{worker.DQN_AGENTS[-1]}"
    written = json.loads((run_dir / "metrics.json").read_text())
    np.testing.assert_array_equal(written["final"]["local_average"], single[f"dqn{worker.DQN_AGENTS[-1]}/final/local_average"])
    with np.load(run_dir / loop.CHECKPOINT) as ckpt:
        assert json.loads(str(ckpt["extra:layout"])) == {"num_processes": 2, "local_devices": 2, "platform": "cpu"}
        assert int(ckpt["extra:blocks_done"]) == worker.dqn_config(8, 4).num_evals


def test_resuming_on_another_process_layout_is_a_clear_error(tmp_path):
    directory = run_directory.RunDirectory(str(tmp_path), {})
    state = {"x": np.zeros(2, np.float32)}

    def written_by(**layout):
        checkpoint.save(directory.checkpoint_path, state, blocks_done=1,
                        **({"layout": json.dumps(layout)} if layout else {}))

    written_by(num_processes=2, local_devices=2, platform="cpu")
    with pytest.raises(ValueError, match=r"written by 2 process\(es\) x 2 devices; this run has 1 x \d+ devices"):
        directory.check_layout()
    written_by()  # written before layouts were recorded: one process
    directory.check_layout()
    written_by(num_processes=1, local_devices=1, platform="cpu")
    directory.check_layout()  # one process: any device count restores it


def test_to_host_and_put_like_round_trip_on_one_process():
    state = {"key": jax.random.split(jax.random.key(1), 3), "x": jax.numpy.arange(6.0).reshape(3, 2)}
    host = distributed.to_host(state)
    assert isinstance(host["x"], np.ndarray) and isinstance(host["key"], np.ndarray)
    np.testing.assert_array_equal(host["key"], jax.random.key_data(state["key"]))
    chex.assert_trees_all_equal(distributed.put_like(state, state), state)
