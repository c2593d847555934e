"""build-shards' worker pool (executor.py): safe whatever the calling process did before,
one line on Ctrl-C, and no test wait without a deadline."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from reliability_checks import PAUSE_DEADLINE_EXIT, default_sigint, start_paused
from shard_fixtures import shard_bytes, write_corpus, write_vocab

TWO_BUILDS = textwrap.dedent("""
    import os, pathlib, sys
    from bertprep.builder.run import BuildConfig, build_shards
    from bertprep.corpus.spec import CorpusSpec

    def main(tmp, corpus, vocab):
        spec = CorpusSpec(paths=(corpus,))
        # The first build encodes in this process with tokenizers' thread pool; the
        # next ones start worker pools afterwards (the notebook case).
        for i, workers in enumerate([1, 2, 2]):
            config = BuildConfig(workers=workers, engine="tokenizers", partition_bytes=4096,
                                 num_shards=2, cache_dir=str(pathlib.Path(tmp) / f"cache{i}"))
            build_shards(spec, vocab, pathlib.Path(tmp) / f"out{i}", config, progress=False)
        print("built", flush=True)

    if __name__ == "__main__":
        main(*sys.argv[1:])
""")


def test_builds_after_threaded_encoding_in_the_same_process_finish(tmp_path):
    """With TOKENIZERS_PARALLELISM=true the parent holds tokenizers' threads after its
    first build; a worker forked from it deadlocks. The builds must finish, and agree."""
    corpus = write_corpus(tmp_path / "corpus.txt", documents=120)
    vocab = write_vocab(tmp_path / "vocab.txt")
    script = tmp_path / "two_builds.py"
    script.write_text(TWO_BUILDS)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "true"}
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path), str(corpus), str(vocab)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the deadlocked workers too
        proc.communicate()
        raise AssertionError("the builds hung (a worker pool forked from a threaded process?)") from None
    assert proc.returncode == 0, err
    assert out.strip() == "built"
    assert shard_bytes(tmp_path / "out0") == shard_bytes(tmp_path / "out1") == shard_bytes(tmp_path / "out2")


def test_ctrl_c_during_a_build_with_workers_prints_one_line(tmp_path):
    """Ctrl-C signals the whole foreground process group: workers included. Only the
    parent may answer, with click's one line; idle workers used to print a traceback."""
    corpus = write_corpus(tmp_path / "corpus.txt", documents=120)
    vocab = write_vocab(tmp_path / "vocab.txt")
    args = ["build-shards", corpus, "--tokenizer", vocab, "--out", tmp_path / "out", "--workers", 2,
            "--quiet", "--partition-size", "4096", "--cache-dir", tmp_path / "cache"]
    # Paused after the pair stage: the workers exist and wait for work.
    proc = start_paused("bertprep.builder.run:_scatter_stage", "prep", args, tmp_path / "paused",
                        deadline=120, start_new_session=True, preexec_fn=default_sigint)
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, output
    assert output.strip() == "Aborted!", output  # click writes a newline first


def test_a_paused_cli_gives_up_at_its_deadline(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", documents=20)
    vocab = write_vocab(tmp_path / "vocab.txt")
    args = ["build-shards", corpus, "--tokenizer", vocab, "--out", tmp_path / "out", "--workers", 1, "--quiet",
            "--cache-dir", tmp_path / "cache"]
    proc = start_paused("bertprep.builder.run:_scatter_stage", "prep", args, tmp_path / "paused", deadline=1)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == PAUSE_DEADLINE_EXIT and "PAUSE_DEADLINE" in output
