"""`bertmodel pretrain --init-from BASE` on shards built with an extension of BASE's
tokenizer (`bertprep extend-tokenizer`): the vocabulary grows (tasks/vocab_growth.py).

Three released layouts built here as a hub download holds them, at a small width with
random weights (std 0.5, so logits are far from flat): a transformers BertForMaskedLM with
BERT-uncased's vocab.txt, extended with Korean petitions; a RobertaForMaskedLM with
roberta-base's tokenizer, extended with English WikiText; a ModernBertForMaskedLM with
ModernBERT-base's tokenizer, extended with Korean into its 83 [unusedK] slots first.

Shown: the model the run starts from (the task's fresh_model) keeps every base row of the
embeddings and the decoder bias bit for bit, and each new row is the mean of the base rows
of the pieces transformers' own tokenizer makes of the token's text (float64 mean, a
float32 rounding apart); on text that the extension encodes with base ids only, its
logits over the base vocabulary are transformers' base model's (float64); a run with
--new-rows-only-steps 2 keeps every other tensor the source's, bit for bit, at steps 1
and 2 while the new rows move, then moves them, and stopped at step 1 and resumed ends
bitwise where it does; the export loads in transformers with the
new size; a tokenizer that changed a base id, a smaller one, and --new-rows-only-steps
without an extension are one line each."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from bertmodel.cli import main as bertmodel_main
from bertmodel.tasks.pretraining import PretrainingTask
from bertmodel.train import TrainConfig
from bertmodel.training.parallel import Dist
from bertprep.cli import main as bertprep_main
from bertprep.tokenizer import load_tokenizer
from head_steps import FLOAT64_TOL, in_float64
from extension_fixtures import BERT_UNCASED, KOREAN, WIKITEXT, petitions_head, skip_without_inputs
from shared_data import TOKENIZERS

transformers = pytest.importorskip("transformers")
skip_without_inputs()
pytestmark = pytest.mark.slow  # three extensions, six shard builds, two short runs: about 60 s
FLOAT32_ROUNDING = 2.0 ** -24  # a float64 value rounded to float32 moves by at most this, relatively
ENGLISH = ["The museum opened in 1921 and its collection grew quickly .",
           "She was born in the north of the country , where her father worked as a teacher ."]


def ok(main, *args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def one_line_error(*args) -> str:
    result = CliRunner().invoke(bertmodel_main, ["pretrain", *map(str, args), "--no-progress"])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def released(family: str, out):
    """transformers' MLM model at a small width with the family's tokenizer files."""
    torch.manual_seed(0)
    if family == "bert":
        config = transformers.BertConfig(vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, max_position_embeddings=128, initializer_range=0.5)
        transformers.BertForMaskedLM(config).save_pretrained(out)
        shutil.copyfile(BERT_UNCASED, out / "vocab.txt")
        return out
    if family == "modernbert":
        real = json.loads((TOKENIZERS / "modernbert-base" / "config.json").read_text())
        config = transformers.ModernBertConfig(**{k: real[k] for k in ("vocab_size", "pad_token_id", "bos_token_id",
                                                                        "eos_token_id", "cls_token_id", "sep_token_id")},
                                               hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                               num_attention_heads=2, max_position_embeddings=512,
                                               global_attn_every_n_layers=2, local_attention=64, initializer_range=0.5)
        transformers.ModernBertForMaskedLM(config).save_pretrained(out)
        for path in (TOKENIZERS / "modernbert-base").iterdir():
            if path.name != "config.json":
                shutil.copyfile(path, out / path.name)
        return out
    real = json.loads((TOKENIZERS / "roberta-base" / "config.json").read_text())
    config = transformers.RobertaConfig(**{k: real[k] for k in ("vocab_size", "pad_token_id", "bos_token_id",
                                                                 "eos_token_id")},
                                        hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=2, max_position_embeddings=130, type_vocab_size=1,
                                        initializer_range=0.5)
    transformers.RobertaForMaskedLM(config).save_pretrained(out)
    for path in (TOKENIZERS / "roberta-base").iterdir():
        if path.name != "config.json":
            shutil.copyfile(path, out / path.name)
    return out


def corpus(family: str, out):
    if family in ("bert", "modernbert"):
        return petitions_head(out), KOREAN
    lines = [line.strip() for line in WIKITEXT.read_text(encoding="utf-8").splitlines()[:200] if line.strip()]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out, ()


def build_shards(text, options, tokenizer, out):
    ok(bertprep_main, "build-shards", text, *options, "--tokenizer", tokenizer, "--out", out, "--max-seq-length", 64,
       "--max-predictions-per-seq", 10, "--dupe-factor", 1, "--pairs", "none", "--no-progress")
    return out


# ModernBERT's new tokens go to its 83 [unusedK] slots first (their rows start anew too).
EXTEND = {"bert": (), "roberta": (), "modernbert": ("--reuse-unused",)}


@pytest.fixture(scope="module", params=list(EXTEND))
def grown(request, tmp_path_factory):
    """(family, source, extension, shards built with it, the model a run starts from, its log)."""
    family = request.param
    root = tmp_path_factory.mktemp(family)
    source = released(family, root / "source")
    text, options = corpus(family, root / "corpus.txt")
    extension = root / "extended"
    ok(bertprep_main, "extend-tokenizer", source, text, *options, "--add", 100, "--out", extension, "--no-progress",
       *EXTEND[family])
    shards = build_shards(text, options, extension, root / "shards")
    lines = []
    cfg = TrainConfig(out=str(root / "unused"), data=[str(shards)], init_from=str(source), batch_size=4,
                      tokenizer=str(extension))
    model = PretrainingTask(cfg, Dist(), lines.append).fresh_model(lines.append)
    return family, source, extension, shards, model, lines


def source_tensors(source) -> dict:
    return load_file(str(source / "model.safetensors"))


def names(family: str) -> tuple[str, str]:
    """(the word embeddings, the decoder bias) under our names (transformers' own)."""
    return {"bert": ("bert.embeddings.word_embeddings.weight", "cls.predictions.bias"),
            "roberta": ("roberta.embeddings.word_embeddings.weight", "lm_head.bias"),
            "modernbert": ("model.embeddings.tok_embeddings.weight", "decoder.bias")}[family]


def transformers_pieces(family: str, source, tokens: list[str]) -> dict[str, list[int]]:
    """The base's pieces of each new token's text by transformers' tokenizer of the
    source: a word-start token as a word; a `##x` one after a character that is a whole
    token alone (so it is split off first and `x` is matched as the rest of a word; a
    word with a character the base lacks is one [UNK], whatever it starts with); a
    byte-level token decoded to its text, where that text is one pre-tokenizer word."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    vocab, backend = tokenizer.get_vocab(), tokenizer.backend_tokenizer
    pieces = {}
    if family == "bert":
        alone = next(t for t in sorted(vocab) if len(t) == 1 and t.isalpha() and backend.normalizer.normalize_str(t) == t
                     and not any(o != t and o.startswith(t) for o in vocab))
        for token in tokens:
            text = alone + token[2:] if token.startswith("##") else token
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            whole_word_unknown = ids == [tokenizer.unk_token_id]  # a character the base lacks
            pieces[token] = ids[1:] if token.startswith("##") and not whole_word_unknown else ids
        return pieces
    for token in tokens:
        text = backend.decoder.decode([token])
        if "\ufffd" not in text and len(backend.pre_tokenizer.pre_tokenize_str(text)) == 1:
            pieces[token] = tokenizer(text, add_special_tokens=False)["input_ids"]
    return pieces


def test_new_rows_are_the_mean_of_their_pieces_and_base_rows_stay(grown):
    family, source, extension, _, model, lines = grown
    base, extended = load_tokenizer(source), load_tokenizer(extension)
    rows = base.vocab_size
    embedding, bias = names(family)
    state, file = model.state_dict(), source_tensors(source)
    new = [i for i, token in enumerate(extended.vocab) if i >= rows or token != base.vocab[i]]
    kept = sorted(set(range(rows)) - set(new))
    assert len(new) == 100 and state[embedding].shape[0] == extended.vocab_size == max(new) + 1
    assert torch.equal(state[embedding][kept], file[embedding][kept])
    assert torch.equal(state[bias][kept], file[bias][kept])
    tokens = [extended.vocab[i] for i in new]
    pieces = transformers_pieces(family, source, tokens)
    assert len(pieces) >= 50  # most new tokens checked (BPE: those whose text is one word)
    for token, ids in pieces.items():
        i = extended.vocab.index(token)
        mean = file[embedding][ids].double().mean(0)
        torch.testing.assert_close(state[embedding][i].double(), mean, rtol=FLOAT32_ROUNDING, atol=0)
        torch.testing.assert_close(state[bias][i].double(), file[bias][ids].double().mean(), rtol=FLOAT32_ROUNDING,
                                   atol=1e-30)
    slots = ", 83 of them reserved [unused] slots" if family == "modernbert" else ""
    assert f"vocabulary {rows:,} -> {extended.vocab_size:,} rows for {extension}: 100 new tokens{slots}, each row " \
           "the mean of the base rows of its pieces under the base tokenizer" in lines


def test_logits_on_base_text_are_the_base_models(grown):
    """Text the extension encodes with base ids only (as the base does): the grown model's
    logits over the base's tokens (all but renamed slots) are transformers' base model's,
    in float64."""
    family, source, extension, _, model, _ = grown
    base, extended = load_tokenizer(source), load_tokenizer(extension)
    encoded = [extended.tokenizer.encode(text) for text in ENGLISH]
    assert [e.ids for e in encoded] == [base.tokenizer.encode(text).ids for text in ENGLISH]
    assert all(max(e.ids) < base.vocab_size for e in encoded)
    T = max(len(e.ids) for e in encoded)
    pad = base.special.pad
    ids = torch.tensor([e.ids + [pad] * (T - len(e.ids)) for e in encoded])
    mask = (torch.arange(T) < torch.tensor([[len(e.ids)] for e in encoded])).long()
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(source)
    model.eval(), theirs.eval()
    with in_float64((model, theirs), []), torch.no_grad():
        a = model(ids, torch.zeros_like(ids), mask, torch.arange(T).expand(len(ENGLISH), T)).mlm_logits
        b = theirs(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    assert a.shape[-1] == extended.vocab_size > b.shape[-1] == base.vocab_size
    kept = [i for i in range(base.vocab_size) if extended.vocab[i] == base.vocab[i]]  # not the renamed slots
    torch.testing.assert_close(a[real][:, kept], b[real][:, kept], atol=FLOAT64_TOL, rtol=FLOAT64_TOL)
    assert not torch.allclose(b[real], b[real][:1].expand_as(b[real]))  # the positions' logits differ


RUN = ("--batch-size", 2, "--max-steps", 3, "--save-every", 1, "--keep-last", 3, "--lr", 1e-3, "--warmup-steps", 0,
       "--seed", 5, "--no-progress")


def test_new_rows_only_steps_keep_every_other_weight_then_train_all(grown, tmp_path):
    family, source, extension, shards, _, _ = grown
    if family != "bert":
        pytest.skip("one run shows the phase")
    run = tmp_path / "run"
    result = ok(bertmodel_main, "pretrain", "--init-from", source, "--data", shards, "--tokenizer", extension,
                "--out", run, "--new-rows-only-steps", 2, *RUN)
    embedding, bias = names(family)
    assert f"the first 2 steps train the 100 new rows of {embedding} only; every other weight stays as it is" \
        in result.output
    file, start = source_tensors(source), grown[4].state_dict()  # the source's tensors, and the grown ones
    states = {s: torch.load(run / "checkpoints" / f"step-{s}" / "state.pt", weights_only=False)["model"]
              for s in (1, 2, 3)}
    rows, others = 30522, [key for key in file if key not in (embedding, bias)]
    for step in (1, 2):
        state = states[step]
        assert [key for key in others if torch.equal(state[key], file[key])] == others, step
        assert torch.equal(state[embedding][:rows], file[embedding])
        assert torch.equal(state[bias], start[bias])  # the new entries too: only embedding rows train
    assert not torch.equal(states[1][embedding][rows:], start[embedding][rows:])  # the new rows learn
    assert not torch.equal(states[1][embedding][rows:], states[2][embedding][rows:])
    moved = [key for key in others if not torch.equal(states[3][key], file[key])]
    assert len(moved) >= 0.9 * len(others)  # after the phase, the body and the head train too
    assert not torch.equal(states[3][embedding][:rows], file[embedding])
    assert not torch.equal(states[3][bias], start[bias])
    # Stopped inside the phase (step 1) and resumed: it continues the phase, bitwise as the whole run.
    options = ("--init-from", source, "--data", shards, "--tokenizer", extension, "--out", tmp_path / "halves",
               "--new-rows-only-steps", 2, *RUN)
    ok(bertmodel_main, "pretrain", *options, "--stop-at", 1)
    ok(bertmodel_main, "pretrain", *options)
    again = torch.load(tmp_path / "halves" / "checkpoints" / "step-3" / "state.pt", weights_only=False)["model"]
    assert all(torch.equal(again[key], states[3][key]) for key in states[3])
    hf, info = transformers.AutoModelForMaskedLM.from_pretrained(run / "hf", output_loading_info=True)
    assert not any(info.values()) and hf.config.vocab_size == rows + 100
    assert len(transformers.AutoTokenizer.from_pretrained(run / "hf")) == rows + 100


def test_bad_vocabularies_are_one_line(grown, tmp_path):
    family, source, extension, shards, _, _ = grown
    if family != "bert":
        pytest.skip("one family's shards serve every refusal")
    text, options = corpus(family, tmp_path / "corpus.txt")
    changed = tmp_path / "changed"
    shutil.copytree(extension, changed)
    vocab = (changed / "vocab.txt").read_text(encoding="utf-8").split("\n")
    vocab[2000] = "zzzz-not-the-base"
    (changed / "vocab.txt").write_text("\n".join(vocab), encoding="utf-8")
    (changed / "tokenizer.json").unlink()  # vocab.txt says it all
    base = ("--init-from", source, "--max-steps", 2, "--batch-size", 2, "--out", tmp_path / "run")
    changed_shards = build_shards(text, options, changed, tmp_path / "changed-shards")  # they carry its files
    assert one_line_error(*base, "--data", changed_shards) == (
        f"Error: {changed_shards}: not an extension of the tokenizer of {source}: id 2,000 is 'zzzz-not-the-base', "
        f"the base's is {load_tokenizer(source).vocab[2000]!r}")
    smaller = tmp_path / "smaller.txt"
    smaller.write_text("".join(BERT_UNCASED.read_text(encoding="utf-8").splitlines(keepends=True)[:30000]))
    assert one_line_error(*base, "--data", build_shards(text, options, smaller, tmp_path / "smaller-shards")) == (
        f"Error: {source}: vocab size 30,522 but the shards' tokenizer has 30,000; use shards built with the "
        "model's tokenizer")
    own = build_shards(text, options, source, tmp_path / "own-shards")
    assert one_line_error(*base, "--data", own, "--new-rows-only-steps", 1) == (
        "Error: --new-rows-only-steps trains the rows a grown vocabulary adds; give --init-from a model whose "
        "tokenizer the shards' tokenizer extends (bertprep extend-tokenizer)")
    assert not (tmp_path / "run").exists()
