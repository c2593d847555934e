"""build-shards' one progress display (every stage's tasks on one bar, MB/s of text) and
its summary of where the work ran, on the local executor; tests/test_build_ray.py checks
the same on Ray."""
from __future__ import annotations

from click.testing import CliRunner

from bertprep import progress
from bertprep.builder import BuildConfig, build_shards
from bertprep.cli import main
from bertprep.corpus import CorpusSpec
from bertprep.executors import ExecutorReport
from bertprep.executors import retry_reason
from progress_checks import Log, check_display
from shard_fixtures import write_corpus, write_vocab

OPTIONS = {"partition_bytes": 8192, "dupe_factor": 2, "shard_rows": 400, "engine": "tokenizers"}


def test_one_display_counts_every_task_of_every_stage_on_the_local_pool(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus.txt", documents=300, seed=4)
    vocab = write_vocab(tmp_path / "vocab.txt")
    log = Log()
    monkeypatch.setattr(progress.sys, "stderr", log)
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)  # a line per update: every count is seen
    config = BuildConfig(workers=2, cache_dir=str(tmp_path / "cache"), **OPTIONS)
    result = build_shards(CorpusSpec(paths=(str(corpus),)), vocab, tmp_path / "out", config, progress=True)
    lines = check_display(log, result.manifest, result.seconds)
    assert len(result.manifest["shards"]) > 1
    # Before the first result nothing tells how many shards there will be; after it,
    # the total is an estimate that the gather stage makes exact.
    assert lines[0][:2] == (0, None)
    assert all(total is not None for _, total, _, _ in lines[2:])
    assert (result.executor.executor, result.executor.nodes, result.executor.cpus) == ("local", 1, 2)
    assert result.executor.summary() == "executor local: 1 node, 2 CPUs, no retries"


def test_the_cli_prints_where_it_ran_and_quiet_prints_no_progress(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus.txt", documents=300, seed=4)
    vocab = write_vocab(tmp_path / "vocab.txt")
    log = Log()
    monkeypatch.setattr(progress.sys, "stderr", log)
    args = [str(corpus), "--tokenizer", str(vocab), "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c"),
            "--partition-size", "8KiB", "--engine", "tokenizers", "--workers", "1", "--quiet"]
    done = CliRunner().invoke(main, ["build-shards", *args])
    assert done.exit_code == 0, done.output
    assert "  executor local: 1 node, 1 CPU, no retries" in done.output.splitlines()
    assert log.getvalue() == ""


def test_the_summary_names_each_retry_and_counts_those_past_the_first_few():
    node, other = "a1b2c3d4" + "0" * 48, "ffee0011" + "0" * 48
    reasons = [retry_reason("scatter_partition", node, 4242, {node}), retry_reason("gather_shard", other, 77, {node})]
    assert reasons == [
        "scatter_partition: worker process 4242 on node a1b2c3d4 died (WorkerCrashedError: killed or crashed)",
        "gather_shard: node ffee0011 lost (NodeDiedError)",
    ]
    assert ExecutorReport("ray", 3, 48, 2, reasons).summary().splitlines() == [
        "executor ray: 3 nodes, 48 CPUs, 2 tasks retried",
        "  retried " + reasons[0],
        "  retried " + reasons[1],
    ]
    many = ExecutorReport("ray", 1, 2, 8, [reasons[0]] * 8).summary().splitlines()
    assert many[0] == "executor ray: 1 node, 2 CPUs, 8 tasks retried"
    assert len(many) == 1 + ExecutorReport.SHOWN_REASONS + 1 and many[-1] == "  and 3 more retries"
