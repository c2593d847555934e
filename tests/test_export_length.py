"""A fine-tuned model's export reads what its run read: RUN/hf's tokenizer claims the
run's --max-seq-length as `model_max_length`, so transformers' and sentence-transformers'
loaders, given inputs longer than that, cut them where the run did and score as the run
scores. Each task is a tiny random BERT trained two steps on real shared data at a short
length (classify: RTE, tokens: CoNLL-2003, choice: e-CARE, rerank and QA: the SQuAD head),
read back by its consumer with no length given, and compared with the run's own scores
(predict, or evaluate's run.trec) on inputs longer than that length."""
from __future__ import annotations

import json

import numpy as np
import pytest

from bertmodel.data.squad import read_squad
from bertmodel.data.squad_beir import squad_to_beir
from bertmodel.data.tagged import read_tagged
from bertmodel.hf import export_hf
from bertmodel.model import BertForPreTraining
from bertmodel.model.config import BertConfig
from bertmodel.data.shards import tokenizer_info
from finetune_fixtures import invoke
from rerank_fixtures import SQUAD, as_pairs, squad_groups, write_jsonl
from shared_data import SHARED_DATA

transformers = pytest.importorskip("transformers")

UNCASED = SHARED_DATA / "bert-base-uncased-vocab.txt"
CASED = SHARED_DATA / "bert-base-cased-vocab.txt"
RTE = SHARED_DATA / "glue" / "RTE"
CONLL = SHARED_DATA / "ner" / "conll2003"
ECARE = SHARED_DATA / "multiple_choice" / "e-CARE"


def needs(*paths):
    missing = [p for p in paths if not p.exists()]
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(map(str, missing))} not found")


# Two steps of a random tiny BERT: a model whose scores move with the tokens it reads, so
# reading up to 512 tokens where the run read 16-32 moves them by 8e-4 to 1e-3 (measured).
FAST = ["--model", "random:tiny", "--device", "cpu", "--no-progress", "--batch-size", "8", "--eval-batch-size", "8",
        "--max-steps", "2", "--seed", "1"]
# float32 on both sides over the same tokens (ours: packed real tokens through oneDNN;
# transformers: padded rows through SDPA) differ by rounding: measured at most 6e-8 of a
# probability or a logit of size ~1 (predict's 6-place rounding of token probabilities,
# 5e-7). 1e-5 is 20x and more that on any x86 CPU, and 80x below what reading past the
# run's length moves a score by.
TOL = dict(rtol=0, atol=1e-5)


def finetune(task, out, *args, lr="1e-3"):
    result = invoke("finetune", task, *FAST, "--lr", lr, "--out", out, *args)
    assert result.exit_code == 0, result.output
    return out


def claimed_length(directory) -> int:
    return json.loads((directory / "tokenizer_config.json").read_text())["model_max_length"]


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


@needs(RTE, UNCASED)
@pytest.mark.slow  # a run and transformers' pipeline: about 10 s
def test_a_classifier_export_and_its_export_hf_read_the_runs_length(tmp_path):
    run = finetune("classify", tmp_path / "rte", "--tokenizer", UNCASED, "--train", RTE / "train.tsv",
                   "--max-train-examples", 16, "--text-column", "sentence1", "--text-pair-column", "sentence2",
                   "--max-seq-length", 32)
    rows = [line.split("\t") for line in (RTE / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:13]]
    pairs = [{"text": r[1], "text_pair": r[2]} for r in rows]
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence1\tsentence2\n" + "".join(f"{r[1]}\t{r[2]}\n" for r in rows), encoding="utf-8")
    predicted = invoke("predict", run, "--file", dev, "--device", "cpu", "--no-progress")
    assert predicted.exit_code == 0, predicted.output
    ours = [r["probabilities"] for r in jsonl(predicted.stdout)]

    exported = tmp_path / "exported"  # export-hf of the run: the same length
    assert invoke("export-hf", run, exported).exit_code == 0
    for model in (run / "hf", exported):
        tokenizer = transformers.AutoTokenizer.from_pretrained(model)
        assert all(len(tokenizer(p["text"], p["text_pair"])["input_ids"]) > 32 for p in pairs)  # RTE's premises
        # The pipeline cuts only when asked (truncation=True), then at model_max_length.
        classify = transformers.pipeline("text-classification", model=str(model), device="cpu")
        theirs = [{s["label"]: s["score"] for s in scores} for scores in classify(pairs, truncation=True, top_k=None)]
        np.testing.assert_allclose([[got[label] for label in mine] for got, mine in zip(theirs, ours)],
                                   [list(mine.values()) for mine in ours], **TOL)
        assert tokenizer.model_max_length == claimed_length(model) == 32


def first_window_sentences(tokenizer, sentences: list[list[str]], pieces: int, count: int) -> list[list[str]]:
    """`count` sentences longer than `pieces` WordPieces whose words fill exactly `pieces`
    at a word boundary: the run's first window (words up to `pieces`) is then the very
    tokens transformers' truncation keeps, and each of those words is scored from the same
    context on both sides."""
    chosen = []
    for words in sentences:
        per_word = [len(tokenizer.tokenize(w)) for w in words]
        ends = np.cumsum(per_word)
        if ends[-1] > pieces and pieces in ends:
            chosen.append(words)
        if len(chosen) == count:
            return chosen
    raise AssertionError(f"fewer than {count} such sentences")


@needs(CONLL, CASED)
@pytest.mark.slow  # a run and transformers' pipeline: about 10 s
def test_a_token_classifier_export_reads_the_runs_first_window(tmp_path):
    run = finetune("tokens", tmp_path / "ner", "--tokenizer", CASED, "--train", CONLL / "train.txt",
                   "--max-train-examples", 16, "--max-seq-length", 24)
    tokenizer = transformers.AutoTokenizer.from_pretrained(run / "hf")
    sentences = first_window_sentences(tokenizer, read_tagged(CONLL / "valid.txt").words, 22, 6)
    conll = tmp_path / "long.txt"
    conll.write_text("\n\n".join("\n".join(words) for words in sentences) + "\n", encoding="utf-8")
    predicted = invoke("predict", run, "--file", conll, "--device", "cpu", "--no-progress")
    assert predicted.exit_code == 0, predicted.output
    records = jsonl(predicted.stdout)
    # The pipeline truncates at model_max_length by itself; every piece, O included.
    pipe = transformers.pipeline("token-classification", model=str(run / "hf"), device="cpu", ignore_labels=[])
    for words, record in zip(sentences, records):
        ends = np.cumsum([len(tokenizer.tokenize(w)) for w in words])
        # The first piece of each word of the run's first window (its first 22 pieces), after [CLS]
        firsts = np.concatenate([[0], ends[:-1]])[ends <= 22] + 1
        pieces = {p["index"]: p for p in pipe(words, is_split_into_words=True)[0]}
        assert [pieces[i]["entity"] for i in firsts] == record["tags"][:len(firsts)]
        # predict rounds its probabilities to 6 places: within TOL
        np.testing.assert_allclose([pieces[i]["score"] for i in firsts], record["probabilities"][:len(firsts)],
                                   **TOL)
        assert max(pieces) == 22  # the rest of the sentence is past the run's length
    assert tokenizer.model_max_length == 24


@needs(ECARE, UNCASED)
@pytest.mark.slow  # a run and two forward passes: about 10 s
def test_a_multiple_choice_export_truncates_where_the_run_did(tmp_path):
    columns = ["--context-column", "premise", "--question-column", "ask-for", "--choice-columns",
               "hypothesis1,hypothesis2"]
    run = finetune("choice", tmp_path / "ecare", "--tokenizer", UNCASED, "--train", ECARE / "train.jsonl",
                   "--max-train-examples", 16, *columns, "--max-seq-length", 16, lr="1e-2")  # 1e-3 leaves both choices at 0.5000
    raw = [json.loads(line) for line in (ECARE / "dev.jsonl").read_text(encoding="utf-8").splitlines()[:12]]
    dev = write_jsonl(tmp_path / "dev.jsonl", raw)
    predicted = invoke("predict", run, "--file", dev, "--device", "cpu", "--no-progress")
    assert predicted.exit_code == 0, predicted.output
    ours = [r["probabilities"] for r in jsonl(predicted.stdout)]

    import torch

    tokenizer = transformers.AutoTokenizer.from_pretrained(run / "hf")
    model = transformers.AutoModelForMultipleChoice.from_pretrained(run / "hf").eval()
    contexts = [r["premise"] for r in raw for _ in range(2)]
    seconds = [f"{r['ask-for']} {r[h]}" for r in raw for h in ("hypothesis1", "hypothesis2")]
    assert sum(len(tokenizer(c, s)["input_ids"]) > 16 for c, s in zip(contexts, seconds)) > len(seconds) // 2
    encoded = tokenizer(contexts, seconds, truncation=True, padding=True, return_tensors="pt")  # no max_length
    with torch.no_grad():
        logits = model(**{k: v.view(len(raw), 2, -1) for k, v in encoded.items()}).logits
    np.testing.assert_allclose(torch.softmax(logits.double(), -1).numpy(), ours, **TOL)
    assert encoded["input_ids"].shape[1] == tokenizer.model_max_length == 16


@needs(SQUAD, UNCASED)
@pytest.mark.slow  # a run, a BM25 evaluation and a CrossEncoder: about 10 s
def test_a_cross_encoder_export_scores_as_the_runs_ranking(tmp_path):
    from sentence_transformers.cross_encoder import CrossEncoder

    from bertmodel.data.beir import read_beir

    squad = json.loads(SQUAD.read_text(encoding="utf-8"))
    squad["data"] = squad["data"][:3]  # each cut to 4 paragraphs of 2 questions: a BEIR dir of 12 passages
    for article in squad["data"]:
        article["paragraphs"] = [{**p, "qas": p["qas"][:2]} for p in article["paragraphs"][:4]]
    (tmp_path / "squad.json").write_text(json.dumps(squad))
    beir = squad_to_beir(tmp_path / "squad.json", tmp_path / "beir", dev_fraction=0.2, test_fraction=0.2).out
    train = write_jsonl(tmp_path / "pairs.jsonl", as_pairs(squad_groups(4, negatives=1, words=300)))
    run = finetune("rerank", tmp_path / "rerank", "--tokenizer", UNCASED, "--train", train, "--max-seq-length", 32)
    ranked = invoke("evaluate", run, "--data", beir, "--validation-split", "test", "--top-k", 5, "--device", "cpu",
                    "--no-progress")
    assert ranked.exit_code == 0, ranked.output
    scores: dict[str, dict[str, float]] = {}
    for line in (run / "run.trec").read_text().splitlines():
        qid, _, docid, _, score, _ = line.split(" ")
        scores.setdefault(qid, {})[docid] = float(score)

    cross_encoder = CrossEncoder(str(run / "hf"), device="cpu")  # no max_length: the export's
    test = read_beir(beir, "test")
    qids = sorted(scores)
    docs = [(q, d) for q in qids for d in sorted(scores[q])]
    passages = {d: (test.corpus[d].get("title", "") + " " + test.corpus[d]["text"]).strip() for _, d in docs}
    assert all(len(cross_encoder.tokenizer(test.queries[q], passages[d])["input_ids"]) > 32 for q, d in docs)
    theirs = cross_encoder.predict([(test.queries[q], passages[d]) for q, d in docs])
    np.testing.assert_allclose(theirs, [scores[q][d] for q, d in docs], **TOL)
    assert cross_encoder.max_seq_length == claimed_length(run / "hf") == 32


@needs(SQUAD, UNCASED)
@pytest.mark.slow  # a run: about 10 s
def test_a_qa_export_reads_the_runs_windows(tmp_path):
    """transformers 5 has no question-answering pipeline: its tokenizer, with no
    max_length, cuts a long context into the run's first window, and with
    return_overflowing_tokens and stride = window - --doc-stride (its stride is the
    overlap, ours the step between starts) into all of them (docs/finetuning.md)."""
    from bertmodel.data.qa_features import prepare_qa_features

    length, doc_stride = 64, 24
    run = finetune("qa", tmp_path / "qa", "--tokenizer", UNCASED, "--train", SQUAD, "--max-train-examples", 16,
                   "--max-seq-length", length, "--doc-stride", doc_stride)
    tokenizer = transformers.AutoTokenizer.from_pretrained(run / "hf")
    examples = read_squad(SQUAD)[:40:8]
    features = prepare_qa_features(examples, run / "hf" / "vocab.txt", length, doc_stride, training=False)
    for number, example in enumerate(examples):
        ours = [features.input_ids[features.row_splits[w]:features.row_splits[w + 1]].tolist()
                for w in np.flatnonzero(features.example_index == number)]
        assert len(ours) > 1  # a SQuAD paragraph is longer than one window of 64
        first = tokenizer(example.question, example.context, truncation="only_second")["input_ids"]
        assert first == ours[0]
        question = len(tokenizer(example.question, add_special_tokens=False)["input_ids"])
        windows = tokenizer(example.question, example.context, truncation="only_second",
                            return_overflowing_tokens=True, stride=length - question - 3 - doc_stride)
        assert windows["input_ids"] == ours
    assert tokenizer.model_max_length == claimed_length(run / "hf") == length


@needs(UNCASED)
def test_a_pretrained_export_claims_its_positions_not_a_training_length(tmp_path):
    """A pre-trained encoder is a starting point: its export claims every position it has
    (fine-tuning through transformers caps its length at model_max_length), whatever
    length the pre-training read."""
    from bertmodel.data.synthetic import write_tokenizer_files

    write_tokenizer_files(tmp_path / "tok", UNCASED)
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=30522, hidden_size=32, num_attention_heads=4,
                                                 intermediate_size=64))
    out = export_hf(model, tmp_path / "hf", tokenizer=tokenizer_info(tmp_path / "tok"),
                    task={"name": "pretraining", "architecture": "BertForPreTraining", "objective": "mlm"})
    assert transformers.AutoTokenizer.from_pretrained(out).model_max_length == 512
