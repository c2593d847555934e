"""build-shards on gs:// against a real GCS emulator (gcp-storage-emulator), started here
on 127.0.0.1 and reached as Google's own clients reach one: STORAGE_EMULATOR_HOST, no
credentials. The build talks to it through pyarrow's GCS filesystem (google-cloud-cpp),
the client a real bucket gets; the tests read and write the bucket through that
filesystem too.

What is shown: gs:// inputs, --out and --cache-dir give the local build's bytes, also on
Ray; a build killed while publishing (a copy on a store) resumes to the same bytes; an
input replaced during the build fails naming it and publishes nothing; a missing bucket
is one line. Found by these tests: pyarrow's GCS `delete_dir` fails on a prefix that never
had a "dir/" marker object (storage.rmtree now checks that nothing is left instead).
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import uuid

import pytest

from bertprep.cli import main as prep_main
from reliability_checks import PREP, invoke, kill_at, one_line_error
from shard_fixtures import shard_bytes
from store_fixtures import OPTIONS, free_port, local_build, start_server

pytest.importorskip("gcp_storage_emulator", reason="the GCS tests need gcp-storage-emulator (the test extra)")
pafs = pytest.importorskip("pyarrow.fs")
if not hasattr(pafs, "GcsFileSystem"):
    pytest.skip("this pyarrow was built without GCS support", allow_module_level=True)

from bertprep.storage import stores as storage  # noqa: E402



@pytest.fixture(scope="module")
def emulator():
    """The emulator in a process of its own, in memory; its host once it answers."""
    port = free_port()
    process = start_server([sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
                            "--port", str(port), "--in-memory"], port, "the GCS emulator")
    yield f"http://127.0.0.1:{port}"
    process.kill()
    process.wait()


@pytest.fixture
def bucket(emulator, monkeypatch):
    """A fresh bucket, with STORAGE_EMULATOR_HOST in this test's environment (the build
    reads it as a user's would); yields (filesystem, bucket name)."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator)
    storage.forget_filesystems()
    fs = pafs.GcsFileSystem(anonymous=True, scheme="http", endpoint_override=emulator.removeprefix("http://"),
                            project_id="test-project")  # creating a bucket names a project
    name = f"b-{uuid.uuid4().hex[:12]}"
    fs.create_dir(name)  # a bucket, at the top level
    yield fs, name
    storage.forget_filesystems()


def keys(fs, prefix: str) -> dict[str, int]:
    """Every object under prefix (bucket/...): key -> size."""
    infos = fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
    return {i.path[len(prefix) + 1:]: i.size for i in infos if i.type == pafs.FileType.File}


def download(fs, prefix: str, dest: pathlib.Path) -> dict[str, bytes]:
    for key in keys(fs, prefix):
        target = dest / key
        target.parent.mkdir(parents=True, exist_ok=True)
        with fs.open_input_stream(f"{prefix}/{key}") as f:
            target.write_bytes(f.read())
    return shard_bytes(dest)


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    return local_build(tmp_path_factory.mktemp("local"))


def upload_inputs(fs, name: str, local) -> str:
    for path in local["in"].iterdir():
        with fs.open_output_stream(f"{name}/in/{path.name}") as f:
            f.write(path.read_bytes())
    return f"gs://{name}/in"


def gs_args(name: str, local, inputs: str) -> list:
    return ["build-shards", inputs, "--tokenizer", local["vocab"], "--out", f"gs://{name}/out",
            "--cache-dir", f"gs://{name}/cache", *OPTIONS]


def same_as_local(fs, name: str, local, tmp_path, inputs: str) -> None:
    got = download(fs, f"{name}/out", tmp_path / "download")
    assert set(got) == set(local["files"])  # nothing else: no work, lock or temporaries
    assert {k: v for k, v in got.items() if k != "manifest.json"} == {
        k: v for k, v in local["files"].items() if k != "manifest.json"}
    expected = local["files"]["manifest.json"].decode().replace(str(local["in"]), inputs)
    assert got["manifest.json"].decode() == expected
    assert not keys(fs, f"{name}/out.partial")


def test_a_build_from_gs_inputs_to_a_gs_out_has_the_bytes_of_the_local_build(bucket, local, tmp_path):
    fs, name = bucket
    inputs = upload_inputs(fs, name, local)
    result = invoke(prep_main, *gs_args(name, local, inputs))
    assert result.exit_code == 0, result.output
    same_as_local(fs, name, local, tmp_path, inputs)
    partitions = json.loads(local["files"]["manifest.json"])["totals"]["partitions"]
    assert len([k for k in keys(fs, f"{name}/cache") if k.endswith(".npz")]) == partitions

    import datasets

    dataset = datasets.load_from_disk(str(tmp_path / "download"))
    reference = datasets.load_from_disk(str(local["out"]))
    assert dataset.num_rows == reference.num_rows > 0 and dataset[:20] == reference[:20]


def test_a_gs_build_killed_while_publishing_resumes_to_the_same_bytes(bucket, local, tmp_path):
    fs, name = bucket
    args = gs_args(name, local, upload_inputs(fs, name, local))
    # The environment travels to the killed process: the emulator's host is set on os.environ.
    kill_at("bertprep.storage.stores:copy_file", "prep", args, tmp_path / "paused", after=3)
    assert "manifest.json" not in keys(fs, f"{name}/out")  # a third of a copy that does not count
    assert len(keys(fs, f"{name}/out")) == 3
    result = invoke(prep_main, *args)
    assert result.exit_code == 0, result.output
    same_as_local(fs, name, local, tmp_path, f"gs://{name}/in")


def test_an_input_replaced_on_gs_during_the_build_fails_naming_it_and_publishes_nothing(
        bucket, local, monkeypatch):
    import bertprep.builder.run as build

    fs, name = bucket
    inputs = upload_inputs(fs, name, local)
    original = build.scatter_partition

    def replace_then_scatter(*args, **kwargs):
        with fs.open_output_stream(f"{name}/in/corpus.txt") as f:
            f.write((local["in"] / "corpus.txt").read_bytes() + b"One more line.\n")
        return original(*args, **kwargs)

    monkeypatch.setattr(build, "scatter_partition", replace_then_scatter)
    message = one_line_error(invoke(prep_main, *gs_args(name, local, inputs)))
    assert message.startswith(f"gs://{name}/in/corpus.txt: changed while the build was reading it"), message
    assert not [k for k in keys(fs, name) if k.startswith("out")]


def test_a_missing_gs_bucket_is_one_line_naming_it(bucket, local):
    fs, name = bucket
    message = one_line_error(invoke(prep_main, *gs_args(name, local, "gs://no-such-bucket/in")),
                             "gs://no-such-bucket")
    assert "does not exist" in message or "no such file" in message, message
    assert keys(fs, name) == {}


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_the_ray_executor_builds_to_a_gs_out_with_the_same_bytes(bucket, local, tmp_path):
    """A local Ray of its own: its workers reach the store through the environment they
    inherit, as a cluster's nodes would through theirs."""
    pytest.importorskip("ray", reason="the Ray executor needs the ray extra (pip install 'bertprep[ray]')")
    fs, name = bucket
    inputs = upload_inputs(fs, name, local)
    done = subprocess.run([*PREP, *gs_args(name, local, inputs), "--executor", "ray", "--workers", "2"],
                          capture_output=True, text=True, timeout=180, env={**os.environ, "RAY_ADDRESS": ""})
    assert done.returncode == 0, done.stderr
    assert "  executor ray: 1 node, 2 CPUs, no retries" in done.stdout.splitlines()
    same_as_local(fs, name, local, tmp_path, inputs)
