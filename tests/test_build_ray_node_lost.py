"""build-shards on Ray when a whole node is lost mid-task: Ray runs its task again on
the node that is left, the bytes are those of the local build, and the summary counts
only the node still alive and names the lost one as the retry's reason.

A cluster of its own (the head runs no tasks, so the driver's node survives; two task
nodes of one CPU), since the lost node stays listed, dead, for the cluster's life.
"""
from __future__ import annotations

import pytest

from bertprep.builder import BuildConfig, build_shards
from bertprep.corpus import CorpusSpec
from shard_fixtures import shard_bytes, write_corpus, write_vocab

ray = pytest.importorskip("ray", reason="the Ray executor needs the ray extra (pip install 'bertprep[ray]')")

pytestmark = pytest.mark.xdist_group("ray")  # one local Ray at a time (conftest.py)

import ray_faults  # noqa: E402

OPTIONS = {"partition_bytes": 8192, "num_shards": 3, "dupe_factor": 2, "engine": "tokenizers"}
# The head declares a node dead after about a second without answers, not Ray's 15 s.
FAST_DEATH = {"health_check_period_ms": 200, "health_check_timeout_ms": 200, "health_check_failure_threshold": 5,
              "health_check_initial_delay_ms": 0}


@pytest.fixture(scope="module")
def cluster():
    yield from ray_faults.driven_cluster({"num_cpus": 0, "_system_config": FAST_DEATH}, [1, 1])


@pytest.mark.slow  # its own three-node cluster: about 25 s
def test_a_node_lost_in_the_middle_of_a_task_is_retried_elsewhere_and_named(cluster, tmp_path, monkeypatch):
    import bertprep.builder.tasks as tasks

    corpus = write_corpus(tmp_path / "corpus.txt", documents=300, seed=4)
    vocab = write_vocab(tmp_path / "vocab.txt")
    spec = CorpusSpec(paths=(str(corpus),))
    local = build_shards(spec, vocab, tmp_path / "local", BuildConfig(workers=1, cache_dir=str(tmp_path / "c1"), **OPTIONS),
                         progress=False)
    assert local.executor.summary() == "executor local: 1 node, 1 CPU, no retries"

    flag = tmp_path / "killed"
    kill = ray_faults.KillOnce(tasks.pair_partition, flag, "bertprep.builder.tasks:write_json_atomic", 3, node=True)
    monkeypatch.setattr("bertprep.builder.run.pair_partition", kill)
    config = BuildConfig(executor="ray", workers=2, cache_dir=str(tmp_path / "c2"), **OPTIONS)
    result = build_shards(spec, vocab, tmp_path / "out", config, progress=False)
    lost = flag.read_text()
    assert lost in {node["NodeID"] for node in ray.nodes() if not node["Alive"]}
    assert shard_bytes(tmp_path / "out") == shard_bytes(tmp_path / "local")
    assert result.executor.summary().splitlines() == [
        "executor ray: 2 nodes, 1 CPU, 1 task retried",
        f"  retried pair_partition: node {lost[:8]} lost (NodeDiedError)",
    ]
