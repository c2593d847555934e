"""Hugging Face parity: our export loads in transformers with no missing/unexpected keys and
the same logits (fp32, 1e-5), and an HF-saved model loads into ours with the same logits."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors import safe_open

from bertmodel.cli import main
from bertmodel.model.config import BertConfig
from bertmodel.data import ShardDataset
from bertmodel.errors import BertmodelError
from bertmodel.hf import export_hf, load_into, load_pretrained
from bertmodel.model import BertForPreTraining
from bertmodel.data.shards import open_shard_dir, tokenizer_info
from bertmodel.data.synthetic import SHARED, build_corpus_shards, small_shard_dir
from bertprep.tokenizer import load_tokenizer

transformers = pytest.importorskip("transformers")
DATA = SHARED / "data"
needs_data = pytest.mark.skipif(not (DATA / "google_sample_text.txt").exists(),
                                reason="../shared/data (google_sample_text.txt, bert vocab) is not available")


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return small_shard_dir(tmp_path_factory.mktemp("export") / "small", rows=48)


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    if not (DATA / "google_sample_text.txt").exists():
        pytest.skip("../shared/data is not available")
    return build_corpus_shards(DATA / "google_sample_text.txt", DATA / "bert-base-uncased-vocab.txt",
                               tmp_path_factory.mktemp("export") / "real", dupe_factor=2)


def hf_outputs(hf_model, b):
    out = hf_model(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"])
    P, V = b["masked_lm_positions"].shape[1], out.prediction_logits.shape[-1]
    index = b["masked_lm_positions"].unsqueeze(-1).expand(-1, P, V)
    return out.prediction_logits.gather(1, index), out.seq_relationship_logits


def assert_same_logits(ours, hf_model, b):
    out = ours(**b)
    mlm, nsp = hf_outputs(hf_model, b)
    assert out.mlm_logits.shape == mlm.shape
    torch.testing.assert_close(out.mlm_logits, mlm, rtol=0, atol=1e-5)
    torch.testing.assert_close(out.nsp_logits, nsp, rtol=0, atol=1e-5)


def export_and_load(model, shard_dir, out):
    info = tokenizer_info(shard_dir)
    export_hf(model, out, tokenizer=info)
    hf, loading = transformers.BertForPreTraining.from_pretrained(out, output_loading_info=True)
    assert {k: v for k, v in loading.items() if v} == {}  # no missing/unexpected/mismatched keys
    return hf.eval()


def batch_of(directory, rows):
    ds = ShardDataset([open_shard_dir(directory)])
    return {k: torch.from_numpy(v) for k, v in ds.collate(np.asarray(rows)).items()}


def test_export_loads_in_transformers_with_same_logits(small, tmp_path):
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=255)).eval()
    with torch.no_grad():  # a non-zero MLM bias, so the tie of decoder.bias is exercised
        model.cls.predictions.bias.normal_()
    hf = export_and_load(model, small, tmp_path / "hf")
    assert_same_logits(model, hf, batch_of(small, range(0, 48, 5)))


@needs_data
def test_export_parity_on_real_shard_batches(real, tmp_path):
    torch.manual_seed(1)
    model = BertForPreTraining(BertConfig.preset("mini")).eval()
    hf = export_and_load(model, real, tmp_path / "hf")
    ds_rows = len(ShardDataset([open_shard_dir(real)]))
    for start in (0, 8, 16):
        b = batch_of(real, range(start, min(start + 8, ds_rows)))
        assert (b["attention_mask"] == 0).any() or b["input_ids"].shape[1] == 128
        assert_same_logits(model, hf, b)


def test_safetensors_holds_what_save_pretrained_writes(small, tmp_path):
    config = BertConfig.preset("tiny", vocab_size=255)
    export_hf(BertForPreTraining(config), tmp_path / "ours", tokenizer=tokenizer_info(small))
    hf = transformers.BertForPreTraining(transformers.BertConfig(**config.to_hf_dict()))
    hf.save_pretrained(tmp_path / "theirs")
    with safe_open(tmp_path / "ours" / "model.safetensors", "pt") as a, \
            safe_open(tmp_path / "theirs" / "model.safetensors", "pt") as b:
        assert sorted(a.keys()) == sorted(b.keys())
        assert "cls.predictions.decoder.weight" not in a.keys()
        assert a.metadata() == {"format": "pt"}
    cfg = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert cfg["architectures"] == ["BertForPreTraining"] and cfg["pad_token_id"] == 0


def test_hf_saved_model_loads_into_ours_with_same_logits(small, tmp_path):
    config = BertConfig.preset("tiny", vocab_size=255)
    torch.manual_seed(2)
    hf = transformers.BertForPreTraining(transformers.BertConfig(**config.to_hf_dict())).eval()
    hf.save_pretrained(tmp_path / "hf")
    pre = load_pretrained(tmp_path / "hf")
    assert pre.config == config and pre.tokenizer is None
    ours = BertForPreTraining(pre.config)
    load_into(ours, pre)
    assert ours.cls.predictions.decoder.weight is ours.bert.embeddings.word_embeddings.weight
    assert_same_logits(ours.eval(), hf, batch_of(small, range(10)))


def test_autotokenizer_loads_the_export(small, tmp_path):
    export_hf(BertForPreTraining(BertConfig.preset("tiny", vocab_size=255)), tmp_path / "hf",
              tokenizer=tokenizer_info(small))
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tok("w7 w12 w7")["input_ids"] == [2, 12, 17, 12, 3]
    assert tok.mask_token_id == 4 and tok.pad_token_id == 0


def test_vocab_only_tokenizer_gets_a_config(tmp_path):
    vocab = tmp_path / "my-vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n")
    export_hf(BertForPreTraining(BertConfig.preset("tiny", vocab_size=7)), tmp_path / "hf",
              tokenizer=tokenizer_info(vocab))
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tok("Hello WORLD")["input_ids"] == [2, 5, 6, 3]  # lower-cased, as BERT's uncased default


def test_load_rejects_mismatched_weights(small, tmp_path):
    export_hf(BertForPreTraining(BertConfig.preset("tiny", vocab_size=255)), tmp_path / "hf",
              tokenizer=tokenizer_info(small))
    pre = load_pretrained(tmp_path / "hf")
    with pytest.raises(BertmodelError, match="weights do not fit the model .*size mismatch"):
        load_into(BertForPreTraining(BertConfig.preset("tiny", vocab_size=300)), pre)
    with pytest.raises(BertmodelError, match="not a run, checkpoint or Hugging Face model directory"):
        load_pretrained(tmp_path)


def test_export_hf_command_round_trips(small, tmp_path):
    export_hf(BertForPreTraining(BertConfig.preset("tiny", vocab_size=255)), tmp_path / "a",
              tokenizer=tokenizer_info(small))
    result = CliRunner().invoke(main, ["export-hf", str(tmp_path / "a"), str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    assert result.output == f"wrote {tmp_path / 'b'} (BertForPreTraining, 2 layers, hidden 128)\n"
    with safe_open(tmp_path / "a" / "model.safetensors", "pt") as a, \
            safe_open(tmp_path / "b" / "model.safetensors", "pt") as b:
        assert all(torch.equal(a.get_tensor(k), b.get_tensor(k)) for k in a.keys())
    result = CliRunner().invoke(main, ["export-hf", str(tmp_path), str(tmp_path / "c")])
    assert result.exit_code == 1 and "not a run, checkpoint or Hugging Face model directory" in result.output


@pytest.mark.parametrize("vocab, lower", [("bert-base-cased-vocab.txt", False), ("bert-base-uncased-vocab.txt", True)])
def test_a_bare_vocab_is_exported_cased_or_not_as_it_was_read(tmp_path, vocab, lower):
    """A bare vocab.txt says nothing of casing; our loader reads it as uncased only when no
    token has an upper-case letter. The tokenizer's record, and so the export, must say
    the same, or transformers (and our own evaluate) would lower-case text a cased model
    was trained on."""
    path = SHARED / "data" / vocab
    if not path.is_file():
        pytest.skip(f"{path} is absent (the shared data)")
    transformers = pytest.importorskip("transformers")
    tok = tokenizer_info(path)
    assert tok.lowercase is lower  # as bertprep's loader reads the file
    out = export_hf(BertForPreTraining(BertConfig.preset("tiny", vocab_size=tok.vocab_size)), tmp_path / "hf",
                    tokenizer=tok)
    assert json.loads((out / "tokenizer_config.json").read_text())["do_lower_case"] is lower
    loaded = transformers.AutoTokenizer.from_pretrained(out)
    assert (loaded.tokenize("Paris")[0] == "paris") is lower


@pytest.mark.parametrize("architecture", ["bert", "modernbert"])
def test_a_bare_vocab_export_loads_in_autotokenizer_with_our_ids(tmp_path, architecture):
    """transformers builds a ModernBERT directory's tokenizer from tokenizer.json alone
    (tokenizer_config.json's BertTokenizer is not consulted), so an export from a bare
    vocab.txt must carry one: AutoTokenizer and our loader give the same ids."""
    from bertmodel.model import ModernBertConfig, head_class

    path = SHARED / "data" / "bert-base-uncased-vocab.txt"
    if not path.is_file():
        pytest.skip(f"{path} is absent (the shared data)")
    tok = tokenizer_info(path)
    if architecture == "bert":
        model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=tok.vocab_size))
    else:
        config = ModernBertConfig.preset("tiny", vocab_size=tok.vocab_size)
        model = head_class(config, "mlm")(config)
    out = export_hf(model, tmp_path / "hf", tokenizer=tok)
    loaded = transformers.AutoTokenizer.from_pretrained(out)
    text = "Héllo, WORLD: the café's naïve résumé, 2,048 tokens."
    ours = load_tokenizer(path).tokenizer.encode(text)
    assert loaded(text)["input_ids"] == ours.ids
