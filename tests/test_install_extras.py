"""A data-prep install never needs torch: it is bertmodel's extra, and the bertmodel
command says which extra to install when it is missing; Ray is an extra of its own."""
from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Runs the bertmodel console script with torch made unimportable, as on a CPU data node.
WITHOUT_TORCH = textwrap.dedent("""
    import importlib.abc, sys
    class NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None
    sys.meta_path.insert(0, NoTorch())
    sys.argv = ["bertmodel", *sys.argv[1:]]
    from bertmodel.entry import main
    main()
""")


def test_bertmodel_without_torch_names_the_extra_in_one_line():
    done = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, "pretrain", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == "Error: bertmodel needs PyTorch, which is not installed: pip install 'bertprep[model]'\n"


def test_bertprep_builds_without_torch(tmp_path):
    """The whole build-shards path, torch unimportable: it never needed it."""
    from shard_fixtures import write_corpus, write_vocab

    corpus, vocab = write_corpus(tmp_path / "c.txt", documents=40), write_vocab(tmp_path / "v.txt")
    code = WITHOUT_TORCH.replace('sys.argv = ["bertmodel", *sys.argv[1:]]\nfrom bertmodel.entry import main\nmain()\n',
                                 "from bertprep.cli import main\nsys.argv = ['bertprep', *sys.argv[1:]]\nmain()\n")
    assert "bertprep.cli" in code
    done = subprocess.run([sys.executable, "-c", code, "build-shards", str(corpus), "--tokenizer", str(vocab),
                           "--out", str(tmp_path / "out"), "--workers", "1", "--quiet",
                           "--cache-dir", str(tmp_path / "cache")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.skipif(tomllib is None, reason="reading pyproject.toml needs Python 3.11's tomllib")
def test_torch_is_only_in_the_model_extra_and_ray_in_its_own():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = lambda requirements: {r.split(">")[0].split("=")[0].split("[")[0].strip() for r in requirements}  # noqa: E731
    extras = project["optional-dependencies"]
    assert not names(project["dependencies"]) & {"torch", "safetensors", "ray"}
    assert {"torch", "safetensors"} <= names(extras["model"])
    assert names(extras["ray"]) == {"ray"} and "torch" not in names(extras["ray"])
    assert project["scripts"]["bertmodel"] == "bertmodel.entry:main"
