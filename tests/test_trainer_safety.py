"""What a training run must never do to a user: overwrite their files on export, train
without a tokenizer, accept changed options silently on resume, let two runs write one
directory, or take a global batch larger than the data; and a model directory with only
tokenizer.json is a tokenizer everywhere."""
from __future__ import annotations

import json
import os
import stat

import pytest
from click.testing import CliRunner

from bertmodel.cli import main
from bertmodel.model.config import BertConfig
from bertmodel.data.shards import tokenizer_info
from bertmodel.errors import BertmodelError
from bertmodel.hf import EXPORT_FILES, export_hf, load_pretrained
from bertmodel.retrieval.sentence_files import SENTENCE_FILES
from bertmodel.model import BertForPreTraining
from bertmodel.data.synthetic import small_shard_dir
from bertprep.storage import DirectoryLock
from bertprep.tokenizer import RELEASED_FILES, load_tokenizer


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return small_shard_dir(tmp_path_factory.mktemp("safety") / "small", rows=48)


def pretrain(shards, out, *extra):
    args = ["pretrain", "--data", str(shards), "--out", str(out), "--preset", "tiny", "--batch-size", "4",
            "--max-steps", "2", "--save-every", "2", "--no-progress", *map(str, extra)]
    return CliRunner().invoke(main, args)


@pytest.fixture(scope="module")
def run(shards, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "run"
    result = pretrain(shards, out)
    assert result.exit_code == 0, result.output
    return out


def snapshot(directory):
    """Every file under `directory` by relative name and bytes."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_export_keeps_a_users_files_with_or_without_overwrite(run, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("important")
    (victim / "config.json").write_text("{}")  # beside an export's name, still the user's folder
    for extra in ([], ["--overwrite"]):
        result = CliRunner().invoke(main, ["export-hf", str(run), str(victim), *extra])
        assert result.exit_code == 1
        assert result.output == (f"Error: {victim}: holds files an export never writes (notes.txt); an export "
                                 "replaces only its own files (1_Pooling, 2_Dense, 2_Normalize, 3_Normalize, added_tokens.json, "
                                 "bertmodel_task.json, config.json, config_sentence_transformers.json, merges.txt, "
                                 "model.safetensors, modules.json, sentence_bert_config.json, "
                                 "sentencepiece.bpe.model, special_tokens_map.json, spm.model, tokenizer.json, "
                                 "tokenizer.model, tokenizer_config.json, vocab.json, vocab.txt), so "
                                 "choose another directory\n")
        assert snapshot(victim) == {"notes.txt": b"important", "config.json": b"{}"}


def test_export_refuses_a_shard_set_with_overwrite_and_keeps_every_file(tmp_path):
    """A real build-shards output: its tokenizer files have an export's names, its
    manifest, state and arrow files do not."""
    from bertprep.cli import main as bertprep_main
    from shard_fixtures import write_corpus, write_vocab

    shards = tmp_path / "shards"
    built = CliRunner().invoke(bertprep_main, [
        "build-shards", str(write_corpus(tmp_path / "corpus.txt", documents=40)), "--tokenizer",
        str(write_vocab(tmp_path / "vocab.txt")), "--out", str(shards), "--quiet", "--cache-dir",
        str(tmp_path / "cache"), "--workers", "1", "--dupe-factor", "1"])
    assert built.exit_code == 0, built.output
    model = tmp_path / "model"
    tok = tokenizer_info(shards)
    export_hf(BertForPreTraining(BertConfig.preset("tiny", vocab_size=tok.vocab_size)), model, tokenizer=tok)
    before = snapshot(shards)
    assert {"manifest.json", "state.json", "dataset_info.json", "tokenizer.json"} <= set(before)
    result = CliRunner().invoke(main, ["export-hf", str(model), str(shards), "--overwrite"])
    assert result.exit_code == 1
    foreign = sorted(n for n in before if n not in ("vocab.txt", "tokenizer.json", "tokenizer_config.json",
                                                    "special_tokens_map.json"))
    assert result.output.startswith(f"Error: {shards}: holds a shard set (bertprep build-shards) "
                                    f"({', '.join(foreign[:5])}"), result.output
    assert "\n" not in result.output.rstrip("\n")
    assert snapshot(shards) == before


def test_export_refuses_a_run_directory_and_keeps_it(run, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "checkpoints").mkdir()
    (other / "metrics.jsonl").write_text('{"step": 1}\n')
    (other / "run.json").write_text('{"task": "pretraining"}\n')
    before = snapshot(other)
    result = CliRunner().invoke(main, ["export-hf", str(run), str(other), "--overwrite"])
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {other}: holds a run directory (checkpoints, metrics.jsonl, "
                                    "run.json); "), result.output
    assert snapshot(other) == before and (other / "checkpoints").is_dir()


def test_overwrite_replaces_an_earlier_export_and_what_only_it_wrote(run, tmp_path, shards):
    out = tmp_path / "out"
    assert CliRunner().invoke(main, ["export-hf", str(run), str(out)]).exit_code == 0
    assert (out / "tokenizer.json").is_file()
    result = CliRunner().invoke(main, ["export-hf", str(run), str(out)])
    assert result.exit_code == 1
    assert result.output == f"Error: {out}: holds an earlier export; pass --overwrite to replace it\n"
    # A bare vocab.txt as the tokenizer: this export builds its tokenizer.json from it
    # (AutoTokenizer reads that file first), and the earlier one's must not stay behind.
    (out / "tokenizer.json").write_text("{}")  # what only the earlier export holds
    result = CliRunner().invoke(main, ["export-hf", str(run), str(out), "--overwrite", "--tokenizer",
                                       str(shards / "vocab.txt")])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["bertmodel_task.json", "config.json", "model.safetensors",
                                                     "special_tokens_map.json", "tokenizer.json",
                                                     "tokenizer_config.json", "vocab.txt"]
    built = load_tokenizer(shards / "vocab.txt").tokenizer.to_str(pretty=True) + "\n"
    assert (out / "tokenizer.json").read_text() == built


def test_every_file_an_export_writes_is_listed_and_anything_else_is_refused(tmp_path):
    tok = tokenizer_info(small_shard_dir(tmp_path / "s", rows=8))
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=tok.vocab_size))
    out = export_hf(model, tmp_path / "hf", tokenizer=tok, task={"architecture": "BertForPreTraining"})
    # A pre-training export writes the transformers files; an embed run's adds
    # sentence-transformers' (test_embed.py), a released tokenizer its own files
    # (test_finetune_any_tokenizer.py), and together they are every name listed.
    released_only = set(RELEASED_FILES) - {"tokenizer_config.json", "special_tokens_map.json"}
    assert {p.name for p in out.iterdir()} == EXPORT_FILES - SENTENCE_FILES - released_only
    export_hf(model, out, tokenizer=tok)  # the library replaces an earlier export (RUN/hf at every save)
    with pytest.raises(BertmodelError, match="holds an earlier export"):
        export_hf(model, out, tokenizer=tok, overwrite=False)
    (out / "README.md").write_text("my model card")
    with pytest.raises(BertmodelError, match=r"holds files an export never writes \(README.md\)"):
        export_hf(model, out, tokenizer=tok)
    assert (out / "README.md").read_text() == "my model card"
    assert not list(tmp_path.glob(".hf.*"))  # no temporary directory left behind


def test_a_run_refuses_a_users_file_in_its_hf_before_training(shards, tmp_path):
    out = tmp_path / "run"
    assert pretrain(shards, out).exit_code == 0
    (out / "hf" / "notes.txt").write_text("mine")
    before = snapshot(out)
    result = pretrain(shards, out, "--max-steps", 4, "--allow-changed-options")
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {out / 'hf'}: holds files an export never writes (notes.txt); ")
    assert snapshot(out) == before  # no step trained, no checkpoint written


@pytest.mark.parametrize("target", ["run", "run/hf", "run/checkpoints", "parent"])
def test_export_never_replaces_its_own_source(run, target):
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    out = {"run": run, "run/hf": run / "hf", "run/checkpoints": run / "checkpoints", "parent": run.parent}[target]
    source = run / "hf" if target == "run/hf" else run
    result = CliRunner().invoke(main, ["export-hf", str(source), str(out), "--overwrite"])
    assert result.exit_code == 1 and "is (or contains, or lies inside) the model being exported" in result.output
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before


def test_export_writes_files_with_the_usual_mode(run, tmp_path):
    result = CliRunner().invoke(main, ["export-hf", str(run), str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    mask = os.umask(0)
    os.umask(mask)
    for name in ("model.safetensors", "config.json"):
        assert stat.S_IMODE((tmp_path / "out" / name).stat().st_mode) == 0o666 & ~mask, name


def test_shards_without_tokenizer_files_are_refused(shards, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    for p in shards.iterdir():
        if p.name not in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            (bare / p.name).write_bytes(p.read_bytes())
    result = pretrain(bare, tmp_path / "run")
    assert result.exit_code == 1
    assert result.output == (f"Error: {bare}: the shards carry no tokenizer files (vocab.txt or tokenizer.json); "
                             "pass --tokenizer with the one they were built with\n")
    assert not (tmp_path / "run").exists()
    result = pretrain(bare, tmp_path / "run", "--tokenizer", shards / "vocab.txt")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "run" / "hf" / "vocab.txt").is_file()


@pytest.mark.parametrize("option, old, new", [("--max-steps", 2, 4), ("--lr", "0.0001", "0.001"),
                                              ("--weight-decay", "0.01", "0.1"), ("--optimizer", "adamw", "lamb"),
                                              ("--batch-size", 4, 2)])
def test_resume_refuses_changed_options_unless_allowed(shards, tmp_path, option, old, new):
    out = tmp_path / "run"
    assert pretrain(shards, out, option, old).exit_code == 0
    result = pretrain(shards, out, option, new)
    assert result.exit_code == 1
    assert f"resuming with changed options ({option} {old} -> {new})" in result.output
    assert "--allow-changed-options" in result.output
    result = pretrain(shards, out, option, new, "--allow-changed-options")
    assert result.exit_code == 0, result.output


def test_a_second_run_into_the_same_directory_is_refused(shards, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with DirectoryLock(out, what="training run"):  # as a running pretrain holds it
        result = pretrain(shards, out)
    assert result.exit_code == 1
    assert result.output == (f"Error: {out}: another training run (pid {os.getpid()}) is writing here; "
                             "wait for it to finish\n")
    assert not (out / "checkpoints").exists() and not (out / "metrics.jsonl").exists()


def test_a_global_batch_larger_than_the_data_is_refused(shards, tmp_path):
    result = pretrain(shards, tmp_path / "run", "--batch-size", 100000)
    assert result.exit_code == 1
    assert result.output == ("Error: the global batch (100,000 x 1 accumulation x 1 ranks = 100,000) is larger than "
                             "the training data (48 samples); lower --batch-size\n")
    assert not (tmp_path / "run").exists()


def test_a_preset_that_conflicts_with_init_from_is_refused(run, shards, tmp_path):
    result = pretrain(shards, tmp_path / "again", "--init-from", run, "--preset", "mini")
    assert result.exit_code == 1 and "--preset mini (4/256/4) conflicts with" in result.output
    ok = CliRunner().invoke(main, ["pretrain", "--data", str(shards), "--out", str(tmp_path / "same"),
                                   "--init-from", str(run), "--preset", "tiny", "--batch-size", "4",
                                   "--max-steps", "1", "--no-progress"])
    assert ok.exit_code == 0, ok.output


def test_a_model_dir_with_only_tokenizer_json_is_a_tokenizer(shards, tmp_path):
    """transformers 5 saves tokenizer.json and no vocab.txt."""
    tok = tokenizer_info(shards)
    hf = tmp_path / "hf"
    export_hf(BertForPreTraining(BertConfig.preset("tiny", vocab_size=tok.vocab_size)), hf, tokenizer=tok)
    (hf / "vocab.txt").unlink()
    pre = load_pretrained(hf)
    assert pre.tokenizer is not None and pre.tokenizer.same_as(tok) is None
    # its files are written once under the temporary folder, named by the tokenizer: a
    # second load (each command loads its model) reuses them rather than leaving another
    again = tokenizer_info(hf)
    assert again.files == pre.tokenizer.files and again.files["vocab.txt"].parent != hf
    assert again.files["vocab.txt"].read_text(encoding="utf-8") == tok.files["vocab.txt"].read_text(encoding="utf-8")
    result = CliRunner().invoke(main, ["fill-mask", str(hf), "w1 [MASK] w3", "--top-k", "2"])
    assert result.exit_code == 0, result.output
    result = pretrain(shards, tmp_path / "run", "--init-from", hf)
    assert result.exit_code == 0, result.output
    assert "no tokenizer files" not in result.output
    out = CliRunner().invoke(main, ["export-hf", str(hf), str(tmp_path / "exported")])
    assert out.exit_code == 0, out.output
    assert json.loads((tmp_path / "exported" / "config.json").read_text())["vocab_size"] == tok.vocab_size
