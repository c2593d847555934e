"""Real data and real weights for the bi-encoder tests: (question, paragraph, other
paragraph) rows from the shared SQuAD v1.1 head, and all-MiniLM-L6-v2 (a real
sentence-transformers BERT) fetched by ../shared/tools/fetch_minilm.sh."""
from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest

from shared_data import SHARED_DATA

SQUAD = SHARED_DATA / "squad" / "squad-v1.1-train-head.json"
FETCH = SHARED_DATA.parent / "tools" / "fetch_minilm.sh"
needs_squad = pytest.mark.skipif(not SQUAD.is_file(), reason=f"{SQUAD} not found")
ARTICLES = (0, 2, 3, 4, 8)  # 183 paragraphs: a corpus the CPU encodes in seconds


def squad_articles(path: Path, articles=ARTICLES) -> Path:
    """The SQuAD head cut to `articles` (their positions in it), written to `path`."""
    squad = json.loads(SQUAD.read_text(encoding="utf-8"))
    squad["data"] = [squad["data"][i] for i in articles]
    path.write_text(json.dumps(squad))
    return path


def minilm_path() -> Path:
    """The fetched model's directory (kept between runs; the script checks it), or a skip."""
    if not FETCH.is_file():
        pytest.skip(f"{FETCH} not found")
    target = Path(tempfile.gettempdir()) / "bertmodel-test-minilm"
    done = subprocess.run(["bash", str(FETCH), str(target)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"all-MiniLM-L6-v2 could not be fetched: {done.stderr.strip()[-300:]}")
    return target


def distinct_rows(count: int, negatives: int = 1, words: int = 40, skip: int = 0) -> list[dict]:
    """`count` rows {query, positive, negatives}: a paragraph's first question, that
    paragraph, and the next `negatives` paragraphs of its article, which are no row's
    positive; paragraphs cut to `words` words. No text occurs twice in the rows, so a
    batch of them has no duplicates (what sentence-transformers' loss assumes)."""
    articles = json.loads(SQUAD.read_text(encoding="utf-8"))["data"]
    cut = lambda text: " ".join(text.split()[:words])  # noqa: E731
    rows, seen = [], set()
    for article in articles:
        paragraphs = article["paragraphs"]
        step = negatives + 1
        for i in range(0, len(paragraphs) - negatives, step):
            if not paragraphs[i]["qas"]:
                continue
            row = {"query": paragraphs[i]["qas"][0]["question"], "positive": cut(paragraphs[i]["context"]),
                   "negatives": [cut(paragraphs[i + k]["context"]) for k in range(1, step)]}
            texts = [row["query"], row["positive"], *row["negatives"]]
            if seen.intersection(texts) or len(set(texts)) != len(texts):
                continue
            seen.update(texts)
            rows.append(row)
    rows = rows[skip:skip + count]
    assert len(rows) == count, f"the SQuAD head has {len(rows)} such rows, not {count}"
    return rows
