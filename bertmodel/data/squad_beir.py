"""A BEIR directory from SQuAD-format data: each paragraph a passage, each answerable
question a query whose one relevant passage (relevance 1) is its own paragraph.

Questions are split into train/dev/test by article, so no article's paragraphs are
judged in two splits: a model fine-tuned on the train qrels is scored on questions about
text it never saw as a positive. The corpus holds every paragraph (those of train
articles stay as distractors, as a BEIR corpus is one for all splits).

The split is a pure function of the titles and the seed: articles are ordered by
sha256(seed, title), then test takes articles in that order until it holds at least
`test_fraction` of the questions, dev likewise, and train the rest. So the same file
gives the same directory on every machine, and adding an article moves no other.

SQuAD v2.0's unanswerable questions are left out: they were written against their
paragraph to have no answer in it, so calling the paragraph relevant would be wrong and
calling it non-relevant would leave the query without a relevant passage.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from bertmodel.data.beir import BeirData, write_beir
from bertmodel.data.squad import read_squad
from bertmodel.errors import BertmodelError


@dataclass
class SquadBeirSummary:
    out: Path
    passages: int
    queries: dict[str, int]   # split -> questions
    articles: dict[str, int]  # split -> articles
    unanswerable: int         # v2.0 questions left out


@dataclass
class SquadCollection:
    corpus: dict[str, dict[str, str]]            # passage id -> {"title", "text"}
    queries: dict[str, str]                      # question id -> question
    qrels: dict[str, dict[str, dict[str, int]]]  # split -> {question id: {passage id: 1}}
    articles: dict[str, int]                     # split -> articles
    unanswerable: int

    def split(self, split: str, source: str = "") -> BeirData:
        """One split as read_beir would read it from the written directory."""
        if split not in self.qrels:
            raise BertmodelError(f"{source}: no split {split!r} (a SQuAD file splits by article into "
                                 f"{', '.join(self.qrels)})")
        qrels = self.qrels[split]
        return BeirData(self.corpus, {q: self.queries[q] for q in qrels}, qrels, split, str(source))


def squad_collection(source, dev_fraction: float = 0.1, test_fraction: float = 0.1,
                     seed: int = 0) -> SquadCollection:
    """The collection of a SQuAD file (anything data/squad.read_squad reads), in memory:
    what squad_to_beir writes (see the module docstring)."""
    if not (0 < dev_fraction < 1 and 0 < test_fraction < 1 and dev_fraction + test_fraction < 1):
        raise BertmodelError(f"dev and test fractions must be in (0, 1) with a sum below 1, got {dev_fraction} "
                             f"and {test_fraction}")
    examples = read_squad(source)
    corpus: dict[str, dict[str, str]] = {}
    passage_of: dict[tuple[str, str], str] = {}   # (title, context) -> passage id
    paragraphs: dict[str, int] = {}               # title -> paragraphs seen
    by_article: dict[str, list[tuple[str, str, str]]] = {}  # title -> [(qid, question, passage id)]
    unanswerable = 0
    for example in examples:
        key = (example.title, example.context)
        if key not in passage_of:
            number = paragraphs.get(example.title, 0)
            paragraphs[example.title] = number + 1
            # Readable, stable ids: the article's title (spaces and tabs as "_") and the
            # paragraph's place in it.
            passage_of[key] = f"{'_'.join(example.title.split()) or 'untitled'}-{number:04d}"
            corpus[passage_of[key]] = {"title": example.title.replace("_", " "), "text": example.context}
        if example.is_impossible:
            unanswerable += 1
            continue
        by_article.setdefault(example.title, []).append((example.id, example.question, passage_of[key]))
    if len(by_article) < 3:
        raise BertmodelError(f"{source}: {len(by_article)} article(s) with answerable questions; a split by article "
                             "into train, dev and test needs at least 3")
    assignment = split_articles({t: len(q) for t, q in by_article.items()}, dev_fraction, test_fraction, seed)
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, dict[str, int]]] = {s: {} for s in ("train", "dev", "test")}
    for title, questions in by_article.items():
        for qid, question, docid in questions:
            queries[qid] = question
            qrels[assignment[title]][qid] = {docid: 1}
    articles = {s: sum(1 for t in assignment.values() if t == s) for s in qrels}
    return SquadCollection(corpus, queries, qrels, articles, unanswerable)


def read_squad_beir(source, split: str) -> BeirData:
    """One split of a SQuAD file's collection (the default fractions and seed: the
    directory `bertmodel squad-to-beir` writes, without writing it)."""
    return squad_collection(source).split(split, str(source))


def squad_to_beir(source, out, dev_fraction: float = 0.1, test_fraction: float = 0.1, seed: int = 0,
                  overwrite: bool = False, progress: bool = False) -> SquadBeirSummary:
    """Write the BEIR directory of a SQuAD file (anything data/squad.read_squad reads) to
    `out` (refused if it exists, unless `overwrite`); `progress`: a bar of the records
    written, on stderr."""
    out = Path(out)
    if out.exists() and not overwrite:  # before reading: the source may be large
        raise BertmodelError(f"{out}: already exists; pass --overwrite to replace it")
    c = squad_collection(source, dev_fraction, test_fraction, seed)
    write_beir(out, c.corpus, c.queries, c.qrels, overwrite=overwrite, progress=progress)
    return SquadBeirSummary(out, len(c.corpus), {s: len(q) for s, q in c.qrels.items()}, c.articles, c.unanswerable)


def split_articles(questions_per_article: dict[str, int], dev_fraction: float, test_fraction: float,
                   seed: int = 0) -> dict[str, str]:
    """title -> "train" | "dev" | "test" (see the module docstring); test and dev get at
    least one article each and train keeps at least one."""
    order = sorted(questions_per_article,
                   key=lambda t: hashlib.sha256(f"{seed}\0{t}".encode("utf-8")).hexdigest())
    total = sum(questions_per_article.values())
    assignment: dict[str, str] = {}
    position = 0
    for split, fraction in (("test", test_fraction), ("dev", dev_fraction)):
        taken = 0
        # Always one article, never so many that a later split is left none.
        while position < len(order) - (2 if split == "test" else 1) and (taken == 0 or taken < fraction * total):
            assignment[order[position]] = split
            taken += questions_per_article[order[position]]
            position += 1
    for title in order[position:]:
        assignment[title] = "train"
    return assignment
