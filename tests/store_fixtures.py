"""What the object-store tests (S3 on moto's server, GCS on an emulator) share: a local
server process started on a free port, the build's options, and the same build on local
paths to compare a store's result with."""
from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import time

from bertprep.cli import main as prep_main
from reliability_checks import invoke
from shard_fixtures import shard_bytes, write_corpus, write_vocab

OPTIONS = ["--partition-size", "24KB", "--num-shards", "3", "--dupe-factor", "2", "--engine", "tokenizers",
           "--workers", "1", "--quiet"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(command: list, port: int, what: str, **env) -> subprocess.Popen:
    """`command` (which listens on 127.0.0.1:port) in a process of its own (in this one it
    would share the GIL with the build), returned once it accepts connections."""
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, **env})
    deadline = time.time() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            if time.time() > deadline or server.poll() is not None:
                server.kill()
                raise AssertionError(f"{what} did not start")
            time.sleep(0.05)


def local_build(base: pathlib.Path) -> dict:
    """The inputs, and the build with OPTIONS on local paths: {"in", "vocab", "out", "files"}."""
    corpus_dir = base / "in"
    corpus_dir.mkdir()
    write_corpus(corpus_dir / "corpus.txt", documents=300, seed=4)
    vocab = write_vocab(base / "vocab.txt")
    out = base / "out"
    result = invoke(prep_main, "build-shards", corpus_dir, "--tokenizer", vocab, "--out", out,
                    "--cache-dir", base / "cache", *OPTIONS)
    assert result.exit_code == 0, result.output
    return {"in": corpus_dir, "vocab": vocab, "out": out, "files": shard_bytes(out)}
