"""build-shards on Ray: the same bytes as the local executor, on a local Ray and on a
two-node cluster, through lost workers, a lost driver and an input changed mid-build.

One two-node cluster (`ray.cluster_utils.Cluster`, both nodes on this machine) serves
the in-process tests of this module; the CLI tests start their own local Ray, as a user
would with `--executor ray` and no address.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from bertprep import progress
from bertprep.builder import BuildConfig, build_shards, staging_path
from bertprep.corpus import CorpusSpec
from bertprep.errors import BertprepError
from progress_checks import Log, check_display
from reliability_checks import PREP, temporaries
from shard_fixtures import shard_bytes, write_corpus, write_vocab
from store_fixtures import free_port

ray = pytest.importorskip("ray", reason="the Ray executor needs the ray extra (pip install 'bertprep[ray]')")

pytestmark = pytest.mark.xdist_group("ray")  # one local Ray at a time (conftest.py)

import ray_faults  # noqa: E402

OPTIONS = {"partition_bytes": 8192, "num_shards": 3, "dupe_factor": 2, "engine": "tokenizers"}
CLI_OPTIONS = ["--partition-size", "8KiB", "--num-shards", "3", "--dupe-factor", "2", "--engine", "tokenizers", "--quiet"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The corpus, the vocabulary and the local builds (1 and 2 workers) to compare with."""
    base = tmp_path_factory.mktemp("ray-inputs")
    corpus = write_corpus(base / "corpus.txt", documents=300, seed=4)
    vocab = write_vocab(base / "vocab.txt")
    local = {}
    for workers in (1, 2):
        out = base / f"local{workers}"
        config = BuildConfig(workers=workers, cache_dir=str(base / f"cache{workers}"), **OPTIONS)
        result = build_shards(CorpusSpec(paths=(str(corpus),)), vocab, out, config, progress=False)
        assert result.manifest["totals"]["partitions"] > 10
        local[workers] = shard_bytes(out)
    return {"corpus": corpus, "vocab": vocab, "local1": local[1], "local2": local[2]}


@pytest.fixture(scope="module")
def cluster():
    """Two Ray nodes of one CPU each on this machine; this process is their driver."""
    yield from ray_faults.driven_cluster({"num_cpus": 1}, [1])


def build_on_ray(inputs, out, cache, progress=False, **options):
    config = BuildConfig(executor="ray", workers=2, cache_dir=str(cache), **{**OPTIONS, **options})
    return build_shards(CorpusSpec(paths=(str(inputs["corpus"]),)), inputs["vocab"], out, config, progress=progress)


def test_local_one_and_two_workers_and_a_two_node_cluster_give_the_same_bytes(inputs, cluster, tmp_path, monkeypatch):
    log = Log()
    monkeypatch.setattr(progress.sys, "stderr", log)
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    result = build_on_ray(inputs, tmp_path / "out", tmp_path / "cache", progress=True)
    assert inputs["local1"] == inputs["local2"]
    assert shard_bytes(tmp_path / "out") == inputs["local1"]  # shards, manifest, tokenizer files
    report = result.executor
    assert (report.executor, report.nodes, report.cpus, report.retries) == ("ray", 2, 2, 0)
    assert report.summary() == "executor ray: 2 nodes, 2 CPUs, no retries"
    check_display(log, result.manifest, result.seconds)  # the same display as the local pool's
    assert "manifest.json" in inputs["local1"] and b'"executor"' not in inputs["local1"]["manifest.json"]


def test_a_compressed_file_cut_while_read_gives_the_local_bytes_on_the_cluster(inputs, cluster, tmp_path):
    """One .gz input, cut into parts by its pair task (plan.cut_while_reading): its parts
    travel back through Ray and scatter on both nodes to the local pool's bytes."""
    import gzip

    packed = tmp_path / "corpus.txt.gz"
    packed.write_bytes(gzip.compress(inputs["corpus"].read_bytes(), mtime=0))
    spec = CorpusSpec(paths=(str(packed),))
    local = BuildConfig(workers=2, cache_dir=str(tmp_path / "cache-local"), **OPTIONS)
    result = build_shards(spec, inputs["vocab"], tmp_path / "local", local, progress=False)
    assert result.manifest["totals"]["partitions"] > 10  # from one planned partition
    on_ray = BuildConfig(executor="ray", workers=2, cache_dir=str(tmp_path / "cache-ray"), **OPTIONS)
    result = build_shards(spec, inputs["vocab"], tmp_path / "ray", on_ray, progress=False)
    assert result.executor.nodes == 2
    assert shard_bytes(tmp_path / "ray") == shard_bytes(tmp_path / "local")


@pytest.mark.parametrize("task, at, index", [
    ("pair_partition", "bertprep.builder.tasks:write_json_atomic", 3),  # its pairs written, its marker not yet
    ("scatter_partition", "bertprep.builder.tasks:write_json_atomic", 5),  # its scatter file written, its marker not yet
    ("gather_shard", "bertprep.shards.writer:sha256_file", 1),  # the shard written under its temporary name
])
def test_a_worker_killed_in_the_middle_of_a_task_is_retried_to_the_same_bytes(inputs, cluster, tmp_path, monkeypatch,
                                                                              task, at, index):
    import bertprep.builder.tasks as tasks

    flag = tmp_path / "killed"
    monkeypatch.setattr(f"bertprep.builder.run.{task}", ray_faults.KillOnce(getattr(tasks, task), flag, at, index))
    result = build_on_ray(inputs, tmp_path / "out", tmp_path / "cache")
    assert flag.exists()  # the worker really died (its pid is in the flag)
    with pytest.raises(ProcessLookupError):
        os.kill(int(flag.read_text()), 0)
    assert result.executor.retries == 1
    # The retry names its task and the process that was killed, on a node still alive.
    [reason] = result.executor.retry_reasons
    assert re.fullmatch(f"{task}: worker process {flag.read_text()} on node [0-9a-f]{{8}} died "
                        r"\(WorkerCrashedError: killed or crashed\)", reason), reason
    assert result.executor.summary().splitlines() == ["executor ray: 2 nodes, 2 CPUs, 1 task retried", f"  retried {reason}"]
    assert shard_bytes(tmp_path / "out") == inputs["local1"]
    assert temporaries(tmp_path) == []


def test_an_input_changed_during_the_build_fails_naming_it_and_publishes_nothing(inputs, cluster, tmp_path, monkeypatch):
    import bertprep.builder.run as build

    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(inputs["corpus"].read_bytes())
    original = build._scatter_stage

    def append_then_scatter(*args, **kwargs):  # the corpus was read; now someone appends to it
        with open(corpus, "a") as f:
            f.write("A late sentence.\n")
        return original(*args, **kwargs)

    monkeypatch.setattr(build, "_scatter_stage", append_then_scatter)
    config = BuildConfig(executor="ray", workers=2, cache_dir=str(tmp_path / "cache"), **OPTIONS)
    with pytest.raises(BertprepError, match=f"^{corpus}: changed while the build was reading it; nothing was published"):
        build_shards(CorpusSpec(paths=(str(corpus),)), inputs["vocab"], tmp_path / "out", config, progress=False)
    assert not (tmp_path / "out").exists() and not staging_path(tmp_path / "out").exists()


def ray_cli(inputs, out, cache, **popen):
    args = [str(inputs["corpus"]), "--tokenizer", str(inputs["vocab"]), "--out", str(out), "--cache-dir", str(cache),
            "--executor", "ray", "--workers", "2", *CLI_OPTIONS]
    return [*PREP, "build-shards", *args]


def test_the_cli_on_a_local_ray_of_its_own(inputs, tmp_path):
    done = subprocess.run(ray_cli(inputs, tmp_path / "out", tmp_path / "cache"), capture_output=True, text=True,
                          timeout=180, env={**os.environ, "RAY_ADDRESS": ""})
    assert done.returncode == 0, done.stderr
    assert shard_bytes(tmp_path / "out") == inputs["local1"]
    assert "  executor ray: 1 node, 2 CPUs, no retries" in done.stdout.splitlines()


def test_the_driver_killed_mid_build_resumes_with_the_same_command_to_the_same_bytes(inputs, tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    command = ray_cli(inputs, out, cache)
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    work = staging_path(out) / "work"
    deadline = time.time() + 120
    while len(list(work.glob("scatter-*.json"))) < 3 and driver.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    assert driver.poll() is None, "the build ended before the driver could be killed"
    os.kill(driver.pid, signal.SIGKILL)  # the driver only: its Ray must notice on its own
    driver.wait()
    finished = {p.name for p in work.glob("*.json")}
    assert not (out / "manifest.json").exists() and len(finished) >= 3
    try:
        rerun = subprocess.run(command, capture_output=True, text=True, timeout=180)
    finally:
        try:
            os.killpg(driver.pid, signal.SIGKILL)  # whatever of the killed driver's Ray outlived it
        except ProcessLookupError:
            pass
    assert rerun.returncode == 0, rerun.stderr
    assert "Resuming the unfinished build" in rerun.stderr
    assert shard_bytes(out) == inputs["local1"]
    assert temporaries(tmp_path) == []


OWN_RAY_STOPS = """
import json, os
from bertprep.executors.ray import RayExecutor

def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True

with RayExecutor(workers=1) as pool:
    assert sorted(pool.map(abs, [-1, -2])) == [1, 2]
    import ray
    node = ray._private.worker._global_node
    started = {kind: [info.process.pid for info in infos] for kind, infos in node.all_processes.items()}
    shutdown, monitor_at_shutdown = ray.shutdown, []

    def recording_shutdown(**kwargs):
        monitor_at_shutdown.append(alive(started["monitor"][0]))
        return shutdown(**kwargs)

    ray.shutdown = recording_shutdown
pool.wait_closed()
assert not ray.is_initialized()
pids = [pid for kind in started.values() for pid in kind]
for _ in range(100):  # the killed are reaped at once; a last one may still be exiting
    if not any(alive(pid) for pid in pids):
        break
    __import__("time").sleep(0.05)
print(json.dumps({"kinds": sorted(started), "alive": [pid for pid in pids if alive(pid)],
                  "monitor_at_shutdown": monitor_at_shutdown}))
"""


def test_a_local_ray_of_its_own_stops_every_process_it_started(tmp_path):
    # The autoscaler monitor is killed ahead of ray.shutdown (it would wait out its
    # SIGTERM second): it and every other process of that Ray must be gone after.
    done = subprocess.run([sys.executable, "-c", OWN_RAY_STOPS], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RAY_ADDRESS": ""}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"monitor", "raylet", "gcs_server"} <= set(found["kinds"])
    assert found["alive"] == []
    assert found["monitor_at_shutdown"] == [False]  # gone before ray.shutdown began: no second waited


JOINS_AND_LEAVES = """
import sys
from bertprep.executors.ray import RayExecutor

with RayExecutor(address=sys.argv[1], workers=1) as pool:
    assert sorted(pool.map(abs, [-1, -2])) == [1, 2]
pool.wait_closed()
print("done")
"""


def _session_pids(session: int, command_part: bytes = b"") -> list[int]:
    """The live processes of one process session (a `ray start` head's) whose command
    line contains command_part. A zombie (exited, not yet reaped) is not live."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
                if stat[stat.rfind(")") + 2] == "Z" or os.getsid(int(entry)) != session:
                    continue
                if command_part in open(f"/proc/{entry}/cmdline", "rb").read():
                    found.append(int(entry))
            except OSError:
                continue
    return found


def _monitor_pids(session: int) -> list[int]:
    return _session_pids(session, b"autoscaler/_private/monitor.py")


def test_a_build_that_joins_a_cluster_leaves_its_monitor_running(tmp_path):
    # Stopping a Ray of the build's own kills that Ray's monitor first; a build that
    # joined a cluster (`ray start`, as on a real one) must leave the cluster's alone.
    port = free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": ""}
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    head = subprocess.Popen([ray_bin, "start", "--head", "--block", "--port", str(port), "--num-cpus", "1",
                             "--include-dashboard", "false"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env, cwd=tmp_path)
    try:
        deadline = time.time() + 60
        while not _monitor_pids(head.pid) and time.time() < deadline:
            time.sleep(0.2)
        monitors = _monitor_pids(head.pid)
        assert monitors, "the head's monitor never started"
        done = subprocess.run([sys.executable, "-c", JOINS_AND_LEAVES, f"127.0.0.1:{port}"], capture_output=True,
                              text=True, timeout=120, env=env, cwd=tmp_path)
        assert done.returncode == 0 and done.stdout.strip().endswith("done"), done.stderr
        assert _monitor_pids(head.pid) == monitors
    finally:
        # `ray start --block` stops gracefully on SIGTERM, but takes ~30 s here; the
        # head is this test's alone, so every process of its session is killed outright.
        for _ in range(100):
            pids = _session_pids(head.pid)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        head.wait(timeout=10)
    assert not _session_pids(head.pid), "processes of the test's Ray head outlived SIGKILL"
