"""build-shards on an object store: s3:// inputs, --out and --cache-dir against a real
S3-compatible server (moto's), started here on 127.0.0.1 with credentials in the
environment of these tests only.

What is shown: the same bytes as the build on local paths; `datasets` loads the result;
a build killed midway resumes with the same command to the same bytes, redoing only
unfinished tasks (also when killed while publishing, which on a store is a copy); a
finished result is reported complete and left untouched; a missing bucket, a missing
key, bad credentials and an unreachable endpoint are one line naming the URL.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
import uuid

import pytest

from bertprep.cli import main as prep_main
from reliability_checks import PREP, invoke, markers_written, one_line_error
from shard_fixtures import shard_bytes
from store_fixtures import OPTIONS, free_port, local_build, start_server

pytest.importorskip("moto.server", reason="the object-store tests need moto's server (pip install 'moto[server]')")
boto3 = pytest.importorskip("boto3", reason="the object-store tests need boto3 (installed with moto)")

from bertprep.storage import stores as storage  # noqa: E402

# Tasks of one build: pairs and scatter per partition, one gather per shard.
PARTITIONS, SHARDS = 8, 3


def start_s3_server(**env) -> tuple[subprocess.Popen, str]:
    """moto's S3 server; returns it and its endpoint once it accepts connections."""
    port = free_port()
    server = start_server([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], port,
                          "moto's server", **env)
    return server, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def server():
    """An S3 server for this module, and the environment that points a client at it."""
    process, endpoint = start_s3_server()
    yield {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": endpoint}
    process.kill()
    process.wait()


@pytest.fixture
def s3(server, monkeypatch):
    """A client of the server, with its credentials and endpoint in this test's
    environment (the build reads them as a user's would), and a fresh bucket."""
    for key, value in server.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    storage.forget_filesystems()  # a filesystem made before these variables were set
    client = boto3.client("s3", endpoint_url=server["AWS_ENDPOINT_URL"], region_name="us-east-1")
    client.bucket = f"b-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=client.bucket)
    yield client
    storage.forget_filesystems()


def objects(client, prefix: str = "") -> dict[str, dict]:
    """Every object under prefix: key -> (ETag, LastModified)."""
    found = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=client.bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            found[item["Key"]] = (item["ETag"], item["LastModified"])
    return found


def download(client, prefix: str, dest: pathlib.Path) -> pathlib.Path:
    """The objects under prefix/ as files of dest (what `aws s3 cp --recursive` does)."""
    dest.mkdir(parents=True)
    for key in objects(client, prefix + "/"):
        target = dest / key[len(prefix) + 1:]
        target.parent.mkdir(parents=True, exist_ok=True)
        client.download_file(client.bucket, key, str(target))
    return dest


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """The inputs, and the same build on local paths to compare with."""
    built = local_build(tmp_path_factory.mktemp("local"))
    manifest = json.loads(built["files"]["manifest.json"])
    assert manifest["totals"]["partitions"] == PARTITIONS and len(manifest["shards"]) == SHARDS
    return built


# The CLI in a process that SIGKILLs itself at the call of MODULE:FUNCTION after AFTER
# normal calls: a driver lost at exactly that point. argv: MODULE:FUNCTION AFTER ARGS...
KILL_AT = r"""
import importlib, os, signal, sys
target, after, *args = sys.argv[1:]
module_name, _, name = target.partition(":")
module = importlib.import_module(module_name)
original, calls = getattr(module, name), [0]
def killed(*a, **k):
    calls[0] += 1
    if calls[0] > int(after):
        os.kill(os.getpid(), signal.SIGKILL)
    return original(*a, **k)
setattr(module, name, killed)
from bertprep.cli import main
sys.argv = ["bertprep", *args]
main()
"""


def kill_at(target: str, after: int, args: list) -> None:
    done = subprocess.run([sys.executable, "-c", KILL_AT, target, str(after), *map(str, args)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr  # it got there


def upload_inputs(client, local) -> str:
    for path in local["in"].iterdir():
        client.upload_file(str(path), client.bucket, f"in/{path.name}")
    return f"s3://{client.bucket}/in"


def s3_args(client, local, inputs: str) -> list:
    return ["build-shards", inputs, "--tokenizer", local["vocab"], "--out", f"s3://{client.bucket}/out",
            "--cache-dir", f"s3://{client.bucket}/cache", *OPTIONS]


def same_as_local(client, local, tmp_path, inputs: str) -> None:
    """OUT on the store holds exactly the local build's files, byte for byte; the
    manifest differs only where it names the inputs (which were given as URLs)."""
    keys = {key.removeprefix("out/") for key in objects(client, "out/")}
    assert keys == set(local["files"])  # nothing else: no work, lock or temporaries
    got = shard_bytes(download(client, "out", tmp_path / "download"))
    assert {k: v for k, v in got.items() if k != "manifest.json"} == {
        k: v for k, v in local["files"].items() if k != "manifest.json"}
    expected = local["files"]["manifest.json"].decode().replace(str(local["in"]), inputs.rstrip("/"))
    assert got["manifest.json"].decode() == expected
    assert not objects(client, "out.partial")


def test_a_build_from_s3_inputs_to_an_s3_out_has_the_bytes_of_the_local_build(s3, local, tmp_path):
    inputs = upload_inputs(s3, local)
    result = invoke(prep_main, *s3_args(s3, local, inputs))
    assert result.exit_code == 0, result.output
    assert f"to s3://{s3.bucket}/out in" in result.output
    same_as_local(s3, local, tmp_path, inputs)
    assert len([k for k in objects(s3, "cache/") if k.endswith(".npz")]) == PARTITIONS  # the cache is on the store

    import datasets

    dataset = datasets.load_from_disk(str(tmp_path / "download"))
    reference = datasets.load_from_disk(str(local["out"]))
    assert dataset.num_rows == json.loads(local["files"]["manifest.json"])["totals"]["rows"] > 0
    assert dataset[:50] == reference[:50] and dataset[-50:] == reference[-50:]


def test_local_inputs_to_an_s3_out_give_the_local_manifest_byte_for_byte(s3, local, tmp_path):
    result = invoke(prep_main, *s3_args(s3, local, str(local["in"])))
    assert result.exit_code == 0, result.output
    same_as_local(s3, local, tmp_path, str(local["in"]))


def test_a_finished_s3_result_is_left_untouched_and_replaced_only_with_overwrite_once_its_successor_is_whole(
        s3, local, tmp_path):
    args = s3_args(s3, local, upload_inputs(s3, local))
    assert invoke(prep_main, *args, "--seed", "7").exit_code == 0
    before = objects(s3)
    time.sleep(1.1)  # LastModified has a resolution of one second
    rerun = invoke(prep_main, *args, "--seed", "7")
    assert rerun.exit_code == 0, rerun.output
    assert rerun.stdout.startswith(f"s3://{s3.bucket}/out: already complete")
    assert objects(s3) == before
    other = invoke(prep_main, *args)  # another build: refused without --overwrite
    one_line_error(other, f"s3://{s3.bucket}/out", "--overwrite")
    assert objects(s3) == before
    # With --overwrite, killed once its successor is complete in OUT.partial but
    # before publishing: the old result is still whole, and still the old one.
    kill_at("bertprep.builder.run:_publish_to_store", 0, [*args, "--overwrite"])
    assert {k: v for k, v in objects(s3).items() if k.startswith("out/")} == {
        k: v for k, v in before.items() if k.startswith("out/")}
    assert f"out.partial/manifest.json" in objects(s3)
    finished = invoke(prep_main, *args, "--overwrite")
    assert finished.exit_code == 0, finished.output
    same_as_local(s3, local, tmp_path, f"s3://{s3.bucket}/in")


# Where the build is killed: (function, normal calls before it), and the tasks finished
# then as (pairs, scatter, shards) markers in OUT.partial/work.
KILL_POINTS = {
    "second-shard-unrenamed": ("bertprep.shards.writer:sha256_file", 1, (PARTITIONS, PARTITIONS, 1)),
    # Publishing copies OUT.partial into OUT, the manifest last: stopped after 3 files.
    "publishing": ("bertprep.storage.stores:copy_file", 3, (0, 0, 0)),
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_a_killed_s3_build_resumes_with_the_same_command_to_the_same_bytes(s3, local, tmp_path, point, monkeypatch):
    target, after, finished_at = KILL_POINTS[point]
    args = s3_args(s3, local, upload_inputs(s3, local))
    kill_at(target, after, args)
    assert f"out/manifest.json" not in objects(s3)  # nothing that looks finished
    finished = {key.rsplit("/", 1)[1] for key in objects(s3, "out.partial/work/") if key.endswith(".json")}
    kinds = ("pairs-", "scatter-", "shard-")
    assert tuple(sum(m.startswith(k) for m in finished) for k in kinds) == finished_at
    if point == "publishing":
        assert len(objects(s3, "out/")) == 3  # a third of a copy, which must not count
    with markers_written(monkeypatch) as rerun:
        result = invoke(prep_main, *args)
    assert result.exit_code == 0, result.output
    redo = 0 if point == "publishing" else PARTITIONS * 2 + SHARDS - len(finished)
    assert not set(rerun) & finished and len(rerun) == len(set(rerun)) == redo
    same_as_local(s3, local, tmp_path, f"s3://{s3.bucket}/in")
    assert not [k for k in objects(s3) if ".tmp-" in k]


def test_an_input_changed_on_the_store_during_the_build_fails_naming_it_and_publishes_nothing(
        s3, local, monkeypatch):
    import bertprep.builder.run as build

    inputs = upload_inputs(s3, local)
    original = build.scatter_partition

    def append_then_scatter(*args, **kwargs):  # the corpus was read; now someone replaces it
        s3.put_object(Bucket=s3.bucket, Key="in/corpus.txt",
                      Body=(local["in"] / "corpus.txt").read_bytes() + b"One more line.\n")
        return original(*args, **kwargs)

    monkeypatch.setattr(build, "scatter_partition", append_then_scatter)
    message = one_line_error(invoke(prep_main, *s3_args(s3, local, inputs)))
    assert message.startswith(f"s3://{s3.bucket}/in/corpus.txt: changed while the build was reading it"), message
    assert not [key for key in objects(s3) if key.startswith("out")]  # nothing published, nothing left


def test_a_missing_bucket_is_one_line_naming_it(s3, local, tmp_path):
    inputs = upload_inputs(s3, local)
    for where, args in (
        ("--out", [*s3_args(s3, local, inputs), "--out", "s3://no-such-bucket/out"]),
        ("inputs", s3_args(s3, local, "s3://no-such-bucket/in")),
        ("--cache-dir", [*s3_args(s3, local, inputs), "--cache-dir", "s3://no-such-bucket/cache"]),
    ):
        message = one_line_error(invoke(prep_main, *args), "s3://no-such-bucket")
        assert message.endswith("the bucket does not exist"), (where, message)
    message = one_line_error(invoke(prep_main, *s3_args(s3, local, f"s3://{s3.bucket}/nothing-here")))
    assert message == f"s3://{s3.bucket}/nothing-here: no such file or directory"
    assert set(objects(s3)) == {f"in/{p.name}" for p in local["in"].iterdir()}  # nothing written


def test_an_unreachable_store_is_one_line(s3, local, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    storage.forget_filesystems()
    message = one_line_error(invoke(prep_main, *s3_args(s3, local, "s3://any-bucket/in")))
    # OUT is the first URL the build touches.
    assert message.startswith(f"s3://{s3.bucket}/out: cannot reach the object store"), message


def test_credentials_the_store_refuses_are_one_line(local, tmp_path):
    """A second server that checks credentials (moto does when told to), and a key it
    does not know."""
    server, endpoint = start_s3_server(INITIAL_NO_AUTH_ACTION_COUNT="0")
    try:
        client_env = {**os.environ, "AWS_ACCESS_KEY_ID": "AKIANOTAKEY", "AWS_SECRET_ACCESS_KEY": "wrong",
                      "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}
        client_env.pop("AWS_PROFILE", None)
        done = subprocess.run([*PREP, "build-shards", "s3://some-bucket/in", "--tokenizer", str(local["vocab"]),
                               "--out", str(tmp_path / "out"), *OPTIONS], capture_output=True, text=True,
                              env=client_env, timeout=120)
    finally:
        server.kill()
        server.wait()
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: s3://some-bucket/in: "), done.stderr
    assert "AWS_ACCESS_KEY_ID" in lines[0] or "access denied" in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_the_ray_executor_builds_to_an_s3_out_with_the_same_bytes(s3, local, tmp_path):
    """A local Ray of its own (as `--executor ray` with no address starts): its workers
    read and write the store with the driver's credentials, as cluster nodes would
    with theirs."""
    pytest.importorskip("ray", reason="the Ray executor needs the ray extra (pip install 'bertprep[ray]')")
    inputs = upload_inputs(s3, local)
    args = [*s3_args(s3, local, inputs), "--executor", "ray", "--workers", "2"]
    done = subprocess.run([*PREP, *args], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "RAY_ADDRESS": ""})
    assert done.returncode == 0, done.stderr
    assert "  executor ray: 1 node, 2 CPUs, no retries" in done.stdout.splitlines()
    same_as_local(s3, local, tmp_path, inputs)


def test_every_input_format_reads_from_the_store_as_from_disk(s3, tmp_path):
    """Compressed text, JSONL and Parquet under a prefix (walked, sorted, hidden and
    unknown names skipped, as a directory is): the same documents as the local copy."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    from bertprep.corpus import CorpusSpec, iter_documents

    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    with gzip.open(tree / "a.txt.gz", "wt") as f:
        f.write("One sentence here.\nAnother one.\n\nA second document.\n")
    (tree / "sub" / "b.jsonl").write_text('{"text": "Json line one.\\nJson line two."}\n{"text": "Second record."}\n')
    pq.write_table(pa.table({"text": ["Parquet row one.", "Parquet row two.\nIts second line."]}), tree / "c.parquet")
    (tree / ".hidden.txt").write_text("Never read.\n")
    (tree / "notes.csv").write_text("not,a,corpus\n")
    for path in tree.rglob("*"):
        if path.is_file():
            s3.upload_file(str(path), s3.bucket, f"tree/{path.relative_to(tree)}")
    local_documents = list(iter_documents(CorpusSpec(paths=(str(tree),))))
    assert len(local_documents) == 6
    assert list(iter_documents(CorpusSpec(paths=(f"s3://{s3.bucket}/tree/",)))) == local_documents
    # A glob as on disk: `*` stays within one name (c.parquet, not sub/), `**/` spans them.
    assert list(iter_documents(CorpusSpec(paths=(f"s3://{s3.bucket}/tree/*.parquet",)))) == local_documents[2:4]
    assert list(iter_documents(CorpusSpec(paths=(f"s3://{s3.bucket}/tree/**/*.jsonl",)))) == local_documents[4:]


def test_a_compressed_input_cut_while_read_builds_on_the_store_as_on_disk(s3, local, tmp_path):
    """A .gz on the store, cut into parts by its pair task: the parts' work files
    (pairs-P-J.npz) live under OUT.partial on the store, and the shards are the bytes
    of the same .gz built on disk."""
    import gzip

    packed = tmp_path / "corpus.txt.gz"
    packed.write_bytes(gzip.compress((local["in"] / "corpus.txt").read_bytes(), mtime=0))
    on_disk = tmp_path / "disk-out"
    result = invoke(prep_main, "build-shards", packed, "--tokenizer", local["vocab"], "--out", on_disk,
                    "--cache-dir", tmp_path / "cache", *OPTIONS)
    assert result.exit_code == 0, result.output
    assert json.loads((on_disk / "manifest.json").read_text())["totals"]["partitions"] > 3  # one file, cut
    s3.upload_file(str(packed), s3.bucket, "gz/corpus.txt.gz")
    result = invoke(prep_main, "build-shards", f"s3://{s3.bucket}/gz/corpus.txt.gz", "--tokenizer", local["vocab"],
                    "--out", f"s3://{s3.bucket}/out", "--cache-dir", f"s3://{s3.bucket}/cache", *OPTIONS)
    assert result.exit_code == 0, result.output
    got = shard_bytes(download(s3, "out", tmp_path / "download"))
    want = shard_bytes(on_disk)
    assert {k: v for k, v in got.items() if k != "manifest.json"} == {k: v for k, v in want.items() if k != "manifest.json"}
    assert not objects(s3, "out.partial")
