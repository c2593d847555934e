"""An embed run whose queries and passages are read differently (their own prefixes, their
own lengths), exported and loaded with `SentenceTransformer(RUN/hf)`: the vectors of
encode_query / encode_document (and encode with a prompt_name) equal ours component by
component, and ours equal the definition written out here on transformers' BertModel
(prefix, cut, [CLS] or mean over the real tokens, unit length) in float64. A resume that
changes how texts are read is refused in one line; with --allow-changed-options it is
honoured, and the export reads texts the new way. A tiny random BERT with MiniLM's
vocabulary, trained two steps on the shared SQuAD head."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertmodel.retrieval.embedder import load_embedder
from embed_fixtures import distinct_rows, minilm_path, needs_squad
from finetune_fixtures import invoke

st = pytest.importorskip("sentence_transformers")
transformers = pytest.importorskip("transformers")
pytestmark = needs_squad

# float32 on every side, the same weights and tokens; only the order of reductions differs
# (our attention and pooling against transformers', padded batches against single texts):
# components of about 0.1 differ by 1e-7 here (a few float32 ulps). 2e-6 leaves room for
# another CPU's kernels, and is far below what a wrong prefix, pooling or cut moves (the
# least, another prefix under [CLS] pooling of this random model: 3e-4; asserted below
# to exceed 10x the bound, so the bound is known to tell them apart).
ATOL = 2e-6
QUERY_LENGTH, PASSAGE_LENGTH = 16, 48
QUERY_PREFIX, PASSAGE_PREFIX = "query: ", "passage: "


@pytest.fixture(scope="module")
def minilm():
    return minilm_path()


@pytest.fixture(scope="module")
def rows():
    return distinct_rows(24, words=80)


def embed_command(minilm, rows, tmp, out, pooling: str, *extra) -> list:
    train = tmp / "train.jsonl"
    if not train.exists():
        train.write_text("".join(json.dumps({"query": r["query"], "positive": r["positive"]}) + "\n"
                                 for r in rows[:16]))
    return ["finetune", "embed", "--model", "random:tiny", "--tokenizer", minilm, "--train", train, "--out", out,
            "--device", "cpu", "--no-progress", "--batch-size", "8", "--max-steps", "2", "--save-every", "1",
            "--pooling", pooling, "--max-query-length", QUERY_LENGTH, "--max-passage-length", PASSAGE_LENGTH,
            "--passage-prefix", PASSAGE_PREFIX, *extra]


@pytest.fixture(scope="module", params=["cls", "mean"])
def run(request, minilm, rows, tmp_path_factory):
    """The run reads queries as 'query: ' + text. [CLS] pooling: stopped at step 1 with
    --query-prefix 'q: ', resumed with 'query: ' (refused, then allowed); mean pooling: a
    plain run."""
    pooling = request.param
    tmp = tmp_path_factory.mktemp(f"embed-export-{pooling}")
    out = tmp / "run"
    if pooling == "mean":
        plain = invoke(*embed_command(minilm, rows, tmp, out, pooling, "--query-prefix", QUERY_PREFIX))
        assert plain.exit_code == 0, plain.output
        return out, pooling
    first = invoke(*embed_command(minilm, rows, tmp, out, pooling, "--query-prefix", "q: ", "--stop-at", "1"))
    assert first.exit_code == 0, first.output
    before = sorted(p.name for p in (out / "checkpoints").iterdir())
    refused = invoke(*embed_command(minilm, rows, tmp, out, pooling, "--query-prefix", QUERY_PREFIX))
    errors = [line for line in refused.output.splitlines() if line.startswith("Error:")]
    assert refused.exit_code == 1 and len(errors) == 1, refused.output
    # How texts are read is part of what the run trains on (its inputs' "reading"): named, old and new.
    assert errors[0].startswith(f"Error: {out}: resuming on other data than the run was trained on (reading: ")
    assert '"query_prefix": "q: "' in errors[0] and '"query_prefix": "query: "' in errors[0]
    assert "--allow-changed-options" in errors[0]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == before  # the run left as it was
    allowed = invoke(*embed_command(minilm, rows, tmp, out, pooling, "--query-prefix", QUERY_PREFIX,
                                    "--allow-changed-options"))
    assert allowed.exit_code == 0 and "resuming from" in allowed.output, allowed.output
    assert "--query-prefix q:  -> query: " in allowed.output  # said, not silent
    return out, pooling


def texts(rows, minilm) -> tuple[list[str], list[str]]:
    """Queries that fit QUERY_LENGTH with their prefix (sentence-transformers cuts every
    text at one length, the passages'); passages past PASSAGE_LENGTH (cut) and short ones."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm)
    queries = [r["query"] for r in rows if len(tokenizer(QUERY_PREFIX + r["query"])["input_ids"]) <= QUERY_LENGTH]
    passages = [r["positive"] for r in rows[:6]] + ["A short passage.", "Yes."]
    assert len(queries) >= 6 and max(len(tokenizer(PASSAGE_PREFIX + p)["input_ids"]) for p in passages) > 60
    return queries[:8], passages


class Definition:
    """transformers' BertModel on prefix + text cut at `length` tokens ([CLS] and [SEP]
    included), one text at a time (no padding at all); [CLS]'s vector or the mean over the
    tokens; unit length, in float64."""

    def __init__(self, hf_dir):
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
        self.model = transformers.BertModel.from_pretrained(hf_dir, add_pooling_layer=False).eval()

    def __call__(self, texts_: list[str], prefix: str, length: int, pooling: str) -> np.ndarray:
        out = []
        for text in texts_:
            ids = self.tokenizer(prefix + text, truncation=True, max_length=length, return_tensors="pt")
            with torch.no_grad():
                hidden = self.model(**ids).last_hidden_state[0].double()  # (T, H)
            vector = hidden[0] if pooling == "cls" else hidden.mean(0)
            out.append((vector / vector.norm()).numpy())
        return np.stack(out)


def test_sentence_transformers_vectors_equal_ours_and_the_definition(run, rows, minilm):
    out, pooling = run
    hf = out / "hf"
    queries, passages = texts(rows, minilm)
    theirs = st.SentenceTransformer(str(hf), device="cpu")
    assert theirs.prompts == {"query": QUERY_PREFIX, "document": PASSAGE_PREFIX}
    assert theirs.max_seq_length == PASSAGE_LENGTH
    assert json.loads((hf / "1_Pooling" / "config.json").read_text())["pooling_mode"] == pooling
    ours = load_embedder(out, device="cpu", batch_size=4)
    assert (ours.settings["query_prefix"], ours.settings["passage_prefix"]) == (QUERY_PREFIX, PASSAGE_PREFIX)
    mine_q = np.asarray(ours.encode_queries(queries), np.float64)
    mine_p = np.asarray(ours.encode_passages(passages), np.float64)
    their_q = np.asarray(theirs.encode_query(queries, batch_size=4), np.float64)
    their_p = np.asarray(theirs.encode_document(passages, batch_size=4), np.float64)
    named_q = np.asarray(theirs.encode(queries, prompt_name="query", batch_size=4), np.float64)
    named_p = np.asarray(theirs.encode(passages, prompt_name="document", batch_size=4), np.float64)
    by_definition = Definition(hf)
    want_q = by_definition(queries, QUERY_PREFIX, QUERY_LENGTH, pooling)
    want_p = by_definition(passages, PASSAGE_PREFIX, PASSAGE_LENGTH, pooling)
    for name, got, want in (("ours, queries", mine_q, want_q), ("ours, passages", mine_p, want_p),
                            ("encode_query", their_q, want_q), ("encode_document", their_p, want_p),
                            ("prompt_name query", named_q, want_q), ("prompt_name document", named_p, want_p)):
        assert got.shape == want.shape, name
        np.testing.assert_allclose(got, want, rtol=0, atol=ATOL, err_msg=name)
    # The bound tells the readings apart: the other prefix, the other pooling, no cut (two
    # long passages).
    other, long = "mean" if pooling == "cls" else "cls", passages[:2]
    for wrong in (by_definition(long, QUERY_PREFIX, PASSAGE_LENGTH, pooling),
                  by_definition(long, PASSAGE_PREFIX, PASSAGE_LENGTH, other),
                  by_definition(long, PASSAGE_PREFIX, 512, pooling)):
        assert np.abs(wrong - want_p[:2]).max(1).min() > 10 * ATOL
