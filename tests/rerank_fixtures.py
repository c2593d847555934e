"""Real (query, passage) data for the reranking tests, from the shared SQuAD v1.1 training
head: a question's own paragraph is its positive, other paragraphs of the same article
(same topic, no answer) its hard negatives."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared_data import SHARED_DATA

SQUAD = SHARED_DATA / "squad" / "squad-v1.1-train-head.json"
needs_squad = pytest.mark.skipif(not SQUAD.is_file(), reason=f"{SQUAD} not found")


def squad_groups(queries: int, negatives: int = 3, skip: int = 0, words: int = 40) -> list[dict]:
    """`queries` rows {query, positive, negatives}: one question per paragraph (the
    first), from the articles in order, paragraphs cut to `words` words (short rows keep
    the tests fast; the texts stay real); `skip` rows are passed over first."""
    articles = json.loads(SQUAD.read_text(encoding="utf-8"))["data"]
    cut = lambda text: " ".join(text.split()[:words])  # noqa: E731
    rows = []
    for article in articles:
        paragraphs = article["paragraphs"]
        for i, paragraph in enumerate(paragraphs):
            if not paragraph["qas"] or len(paragraphs) <= negatives:
                continue
            others = [paragraphs[(i + k) % len(paragraphs)]["context"] for k in range(1, negatives + 1)]
            rows.append({"query": paragraph["qas"][0]["question"], "positive": cut(paragraph["context"]),
                         "negatives": [cut(o) for o in others]})
    rows = rows[skip:skip + queries]
    assert len(rows) == queries
    return rows


def as_pairs(groups: list[dict]) -> list[dict]:
    """Each group as labelled pairs: the positive 1, each negative 0."""
    return [pair for g in groups for pair in
            [{"query": g["query"], "passage": g["positive"], "label": 1}]
            + [{"query": g["query"], "passage": n, "label": 0} for n in g["negatives"]]]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path
