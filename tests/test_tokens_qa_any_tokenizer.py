"""Token classification and question answering with released tokenizers (byte-level BPE:
roberta-base, ModernBERT-base; SentencePiece Unigram: deberta-v3-base), each against
transformers' own tokenizer on the same files:

- NER windows label the first token of each word exactly where transformers'
  `word_ids()` recipe does (run_ner: `tokenizer(words, is_split_into_words=True)`, RoBERTa
  with `add_prefix_space=True`), on every sentence of CoNLL-2003's train and valid files;
- QA windows are transformers' `tokenizer(question, context, truncation="only_second",
  stride=..., return_overflowing_tokens=True)` windows id for id on every question of the
  SQuAD v1.1 head, the answer labels are run_qa's, and the labelled span cut from our
  offsets is the answer's text;
- a tiny random-weight ModernBERT fine-tuned by `bertmodel finetune tokens` / `qa`:
  transformers' token-classification pipeline on the export gives the entities
  `bertmodel predict` gives, and transformers' QA model on its own tokenizer's windows
  gives the answers `bertmodel predict` gives.
"""
from __future__ import annotations

import functools
import json
import shutil
import subprocess
import traceback

import numpy as np
import pytest
import torch

from bertmodel.data.qa_features import prepare_qa_features
from bertmodel.data.squad import read_squad
from bertmodel.data.tagged import read_tagged
from bertmodel.data.word_windows import IGNORE_INDEX, encode_words
from bertmodel.tasks.entity_text import text_words
from bertmodel.tasks.tokens import TagSet
from bertprep.tokenizer import load_tokenizer
from shared_data import SHARED_DATA

transformers = pytest.importorskip("transformers")

TOKENIZERS = SHARED_DATA / "tokenizers"
CONLL = SHARED_DATA / "ner" / "conll2003"
SQUAD = SHARED_DATA / "squad" / "squad-v1.1-train-head.json"
RELEASED = ("roberta-base", "modernbert-base", "deberta-v3-base")
needs_data = pytest.mark.skipif(not (TOKENIZERS / "roberta-base").is_dir() or not CONLL.is_dir()
                                or not SQUAD.is_file(), reason=f"the shared tokenizers, NER and SQuAD data are "
                                                               f"not at {SHARED_DATA}")


@functools.cache
def released(name: str):
    """Our tokenizer of the shared files, loaded once (DeBERTa-v3's SentencePiece model
    takes seconds to convert)."""
    return load_tokenizer(TOKENIZERS / name)


@functools.cache
def reference(name: str, **options):
    """transformers' fast tokenizer on the shared files (DeBERTa-v3's directory has no
    config.json for AutoTokenizer to find its class by), loaded once per options: a
    call sets its own truncation and padding, so the tests share it unchanged."""
    if name == "deberta-v3-base":
        return transformers.DebertaV2Tokenizer.from_pretrained(TOKENIZERS / name, **options)
    return transformers.AutoTokenizer.from_pretrained(TOKENIZERS / name, **options)


# -- NER: first-token labels --------------------------------------------------------------------

def run_ner_words(name: str, words: list[list[str]]):
    """transformers' encoding of pre-split words as its NER recipe asks: RoBERTa with
    add_prefix_space=True. transformers 5 ignores add_prefix_space for ModernBERT's
    generic fast tokenizer, so there each word is given its leading space itself, which
    is what the option does (the byte-level pre-tokenizer prepends one to a word that
    has none)."""
    if name == "modernbert-base":
        return reference(name)([[" " + w for w in sentence] for sentence in words], is_split_into_words=True)
    return reference(name, **({"add_prefix_space": True} if name == "roberta-base" else {}))(
        words, is_split_into_words=True)


@needs_data
@pytest.mark.slow
@pytest.mark.parametrize("name", RELEASED)
def test_ner_labels_the_first_token_of_each_word_as_transformers_word_ids(name):
    tok = released(name)
    train = read_tagged(CONLL / "train.txt")
    tags = TagSet.from_data(train)
    compared = differences = 0
    for data in (train, read_tagged(CONLL / "valid.txt")):
        windows = encode_words(tok, data.words, 512, data.tags, tags.ids)
        assert windows.split_sentences == 0 and len(windows) == len(data.words)
        theirs = run_ner_words(name, data.words)
        for i, sentence_tags in enumerate(data.tags):
            lo, hi = windows.offsets[i], windows.offsets[i + 1]
            labels = windows.labels[lo:hi]
            word_ids = theirs.word_ids(i)
            firsts = [j for j, w in enumerate(word_ids) if w is not None and (j == 0 or word_ids[j - 1] != w)]
            expected = np.full(len(word_ids), IGNORE_INDEX)
            expected[firsts] = [tags.ids[sentence_tags[word_ids[j]]] for j in firsts]
            compared += 1
            differences += (windows.input_ids[lo:hi].tolist() != theirs["input_ids"][i]
                            or labels.tolist() != expected.tolist())
    assert (compared, differences) == (14_041 + 3_250, 0)


def test_ner_windows_wrap_words_in_the_tokenizers_single_template():
    tok = released("roberta-base")
    words = [["EU", "rejects", "(German)", "call"]]
    windows = encode_words(tok, words, 5, [["B-ORG", "O", "B-MISC", "O"]], {"O": 0, "B-ORG": 1, "B-MISC": 2})
    # <s> ĠEU Ġrejects </s> | <s> Ġ( German ) </s> | <s> Ġcall </s>: three words' tokens a window at most
    pieces = [tok.vocab[i] for i in windows.input_ids]
    assert pieces == ["<s>", "ĠEU", "Ġrejects", "</s>", "<s>", "Ġ(", "German", ")", "</s>", "<s>", "Ġcall", "</s>"]
    assert windows.labels.tolist() == [-100, 1, 0, -100, -100, 2, -100, -100, -100, -100, 0, -100]
    assert windows.offsets.tolist() == [0, 4, 9, 12] and windows.split_sentences == 1


@needs_data
@pytest.mark.parametrize("name,words", [
    # the pipeline's fallback: a word starts at the text's start or at a space
    ("roberta-base", ["The", "", "EU", "rejects", "(German)", "call.", "U.S.-based", "Café"]),
    ("modernbert-base", ["The", "", "EU", "rejects", "(German)", "call.", "U.S.-based", "Café"]),
    ("deberta-v3-base", ["The", "EU", "rejects", "(German)", "call.", "U.S.-based", "Café"]),
])
def test_text_words_are_the_pipelines_words_without_their_space(name, words):
    text = "The  EU rejects (German) call. U.S.-based Café"
    spans = text_words(released(name), text)
    # The second space is a token of its own for byte-level BPE (RoBERTa's Ġ, ModernBERT's
    # two-space token), so a word of no characters as in the pipeline; SentencePiece's
    # normalizer folds it away.
    assert [text[s:e] for s, e in spans] == words


# -- QA: windows, labels and answers -----------------------------------------------------------------

def run_qa_labels(offsets, sequence_ids, start_char: int, end_char: int) -> tuple[int, int]:
    """run_qa.py's answer labels from a window's offsets, with two of its slips mended:
    its start scan runs past the context into the last special token (whose offsets are
    (0, 0)) when the answer starts at the window's last token; and where byte-level BPE
    splits the answer's first character into several tokens (each covering it), it
    starts at the last of them, so here the start moves back over the tokens before it
    that still cover that character."""
    first = sequence_ids.index(1)
    last = len(sequence_ids) - 1 - sequence_ids[::-1].index(1)
    if not (offsets[first][0] <= start_char and offsets[last][1] >= end_char):
        return 0, 0
    start = first
    while start <= last and offsets[start][0] <= start_char:
        start += 1
    start -= 1
    while start > first and offsets[start - 1][1] > start_char:
        start -= 1
    end = last
    while offsets[end][1] >= end_char:
        end -= 1
    return start, end + 1


@needs_data
@pytest.mark.slow
@pytest.mark.parametrize("name", RELEASED)
def test_qa_windows_are_transformers_overflow_windows_and_labels_give_the_answer(name):
    tok = released(name)
    theirs = reference(name)
    examples = read_squad(SQUAD)
    max_seq_length, doc_stride = 128, 48  # most contexts need several windows
    features = prepare_qa_features(examples, tok, max_seq_length, doc_stride, max_query_length=64)
    assert features.skipped == [] and features.questions_cut == 0
    windows_of = {}
    for w, e in enumerate(features.example_index.tolist()):
        windows_of.setdefault(e, []).append(w)
    counts = {"examples": 0, "windows": 0, "ids": 0, "labels": 0, "exact": 0, "as_transformers": 0, "other": 0,
              "space_in_their_offsets": 0}
    for e, example in enumerate(examples):
        q_len = int(features.context_position[windows_of[e][0]]) - len(tok.template.prefix) - len(tok.template.middle)
        # transformers' stride is the windows' overlap, Google's doc_stride the step between them
        stride = max_seq_length - q_len - tok.template.pair_specials - doc_stride
        encoded = theirs(example.question, example.context, truncation="only_second", max_length=max_seq_length,
                         stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True)
        counts["examples"] += 1
        ours = [features.window(w) for w in windows_of[e]]
        counts["ids"] += [w["input_ids"].tolist() for w in ours] != encoded["input_ids"]
        if "token_type_ids" in encoded:
            counts["ids"] += [w["token_type_ids"].tolist() for w in ours] != encoded["token_type_ids"]
        text, begin = example.answers[0]
        for k, (w, window) in enumerate(zip(windows_of[e], ours)):
            counts["windows"] += 1
            offsets = encoded["offset_mapping"][k]
            start, end = int(features.start_positions[w]), int(features.end_positions[w])
            counts["labels"] += (start, end) != run_qa_labels(offsets, encoded.sequence_ids(k), begin,
                                                              begin + len(text))
            if start == 0:
                continue
            got = example.context[window["offsets"][start, 0]:window["offsets"][end, 1]]
            their_text = example.context[offsets[start][0]:offsets[end][1]]
            counts["space_in_their_offsets"] += their_text != their_text.strip()
            # an answer that cuts a word ("six" of "sixth") is labelled with the whole token
            key = "exact" if got == text else "as_transformers" if got == their_text.strip() else "other"
            counts[key] += 1
    assert counts["examples"] == 3_807 and counts["windows"] == len(features) > 9_000
    assert (counts["ids"], counts["labels"], counts["other"]) == (0, 0, 0)
    assert counts["exact"] > 0.98 * (counts["exact"] + counts["as_transformers"])
    # ModernBERT's and DeBERTa's offsets keep a token's leading space, RoBERTa's processor trims it
    assert (counts["space_in_their_offsets"] > 1_000) == (name != "roberta-base")


def test_qa_windows_in_robertas_template():
    tok = released("roberta-base")
    from qa_fixtures import example

    context = "The cat sat on the mat in Żelazowa Wola."
    features = prepare_qa_features([example(context, "Where?", "Żelazowa Wola")], tok, max_seq_length=16,
                                   doc_stride=3)
    first = [tok.vocab[i] for i in features.window(0)["input_ids"]]
    assert first == ["<s>", "Where", "?", "</s>", "</s>", "The", "Ġcat", "Ġsat", "Ġon", "Ġthe", "Ġmat", "Ġin", "ĠÅ",
                     "»", "el", "</s>"]
    assert features.context_position.tolist() == [5] * len(features) and not features.token_type_ids.any()
    labelled = [w for w in range(len(features)) if features.start_positions[w]]
    w = labelled[0]
    offsets = features.window(w)["offsets"]
    # Ż is two byte-level tokens sharing its offsets: the answer starts at the first
    assert context[offsets[features.start_positions[w], 0]:offsets[features.end_positions[w], 1]] == "Żelazowa Wola"
    assert [tok.vocab[i] for i in features.window(w)["input_ids"][features.start_positions[w]:][:2]] == ["ĠÅ", "»"]


# -- a tiny ModernBERT, fine-tuned and read by transformers ------------------------------------------

def bertmodel(*args):
    """`bertmodel ARGS` in this process (CliRunner): (returncode, stdout, stderr) as a
    subprocess's, without the start-up and imports of four more interpreters."""
    from click.testing import CliRunner

    from bertmodel.cli import main

    result = CliRunner().invoke(main, [str(a) for a in args])
    crash = "" if result.exit_code == 0 or result.exc_info is None else "".join(
        traceback.format_exception(*result.exc_info))
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr + crash)


def tiny_modernbert(directory):
    """A random-weight ModernBERT in transformers' layout beside the real ModernBERT-base
    tokenizer files."""
    torch.manual_seed(0)
    config = transformers.ModernBertConfig(
        vocab_size=50_368, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2,
        max_position_embeddings=512, global_attn_every_n_layers=2, local_attention=64, pad_token_id=50_283,
        cls_token_id=50_281, sep_token_id=50_282, bos_token_id=50_281, eos_token_id=50_282)
    transformers.ModernBertForMaskedLM(config).save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(TOKENIZERS / "modernbert-base" / name, directory / name)
    return directory


def inside_space(text: str, start: int, end: int) -> tuple[int, int]:
    """A span moved inside the whitespace at its ends (RobertaProcessing's trim_offsets)."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


@needs_data
@pytest.mark.slow
def test_a_tiny_modernbert_predicts_the_entities_and_answers_transformers_reads_from_its_export(tmp_path):
    model = tiny_modernbert(tmp_path / "modernbert")
    ner, qa = tmp_path / "ner", tmp_path / "qa"
    done = bertmodel("finetune", "tokens", "--model", model, "--train", CONLL / "train.txt", "--validation",
                     CONLL / "valid.txt", "--max-train-examples", 64, "--max-eval-examples", 40, "--batch-size", 16,
                     "--epochs", 1, "--lr", "1e-4", "--out", ner, "--no-progress")
    assert done.returncode == 0, done.stderr
    texts = ["Ada Lovelace worked with Charles Babbage in London .",
             "Reuters reported from (Germany) on Monday, said U.S.-based EU officials.",
             "The  EU rejects German call to boycott British lamb.\nPeter Blackburn",
             "Żelazowa Wola is near Warsaw; naïve Café Müller in the 1990s"]
    pipe = transformers.pipeline("token-classification", model=str(ner / "hf"), aggregation_strategy="first",
                                 device="cpu")
    predicted = bertmodel("predict", ner, *texts)
    assert predicted.returncode == 0, predicted.stderr
    entities = 0
    for text, record in zip(texts, map(json.loads, predicted.stdout.splitlines())):
        expected = pipe(text)
        # the pipeline's ModernBERT entities start at the space their first token carries
        assert [(e["entity_group"], *inside_space(text, e["start"], e["end"])) for e in expected] == \
            [(e["entity_group"], e["start"], e["end"]) for e in record["entities"]]
        assert [e["score"] for e in record["entities"]] == pytest.approx([float(e["score"]) for e in expected],
                                                                           abs=1e-5)
        entities += len(expected)
    assert entities > 20  # an untrained head tags words all over

    done = bertmodel("finetune", "qa", "--model", model, "--train", SQUAD, "--validation", SQUAD,
                     "--max-train-examples", 64, "--max-eval-examples", 40, "--batch-size", 16, "--epochs", 1,
                     "--lr", "1e-4", "--max-seq-length", 128, "--doc-stride", 48, "--out", qa, "--no-progress")
    assert done.returncode == 0, done.stderr
    assert_answers_are_transformers(qa, read_squad(SQUAD)[200:212], tmp_path)


def assert_answers_are_transformers(run, examples, tmp_path):
    """`bertmodel predict` answers = our decoding of transformers' QA logits over the
    windows its tokenizer cuts from the export's files (the same ids as ours)."""
    from bertmodel.data.qa_decode import decode_predictions

    model = transformers.AutoModelForQuestionAnswering.from_pretrained(run / "hf").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(run / "hf")
    features = prepare_qa_features(examples, run / "hf", 128, 48, 64, training=False)
    starts, ends = [], []
    for e, example in enumerate(examples):
        windows = np.flatnonzero(features.example_index == e)
        q_len = int(features.context_position[windows[0]]) - 2  # [CLS] question [SEP]
        encoded = tokenizer(example.question, example.context, truncation="only_second", max_length=128,
                            stride=128 - q_len - 3 - 48, return_overflowing_tokens=True, padding=True,
                            return_tensors="pt")
        mask = encoded["attention_mask"].bool()
        assert [features.window(w)["input_ids"].tolist() for w in windows] == \
            [row[keep].tolist() for row, keep in zip(encoded["input_ids"], mask)]
        with torch.no_grad():
            out = model(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"])
        starts += [row[keep].numpy() for row, keep in zip(out.start_logits, mask)]
        ends += [row[keep].numpy() for row, keep in zip(out.end_logits, mask)]
    theirs, _ = decode_predictions(examples, features, starts, ends)
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps({"question": e.question, "context": e.context}) + "\n" for e in examples))
    answers = tmp_path / "answers.jsonl"
    done = bertmodel("predict", run, "--file", questions, "--out", answers)
    assert done.returncode == 0, done.stderr
    got = [json.loads(line)["answer"] for line in answers.read_text().splitlines()]
    assert got == [theirs[e.id] for e in examples]
    assert all(got)
