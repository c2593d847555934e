"""Are the pairs (or rows) of a build any good? The figures, and one warning when they are not.

Pairs degenerate when documents are short: a chunk of one sentence is always given a
random B (REFERENCE.md: single-sentence chunks are random-next, so the random fraction
sits at about 0.56 on typical text), and a document shorter than the target length
gives rows far shorter than --max-seq-length. The usual cause is a layout mismatch:
hard-wrapped prose read with `--sentences lines` or `split` makes every paragraph a
document. build-shards prints the warning after pairing, before publishing; `bertprep
inspect` prints the same figures and warning from the manifest and the rows. It is not an
error: a corpus of short texts (posts, titles) is legitimately short.

What is checked follows the pairing (`--pairs`): NSP pairs by their random fraction and
length; SOP pairs, whose label is a fair coin, and FULL-SENTENCES rows, which carry no
label, by their length only.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from bertprep.corpus import plural

# Thresholds. The random fraction is 0.5 + half the share of one-sentence chunks; 0.625
# means one chunk in four is a single sentence. Measured at --max-seq-length 128 on the
# shared data: Wikipedia read with --sentences split 0.541 (8% one-sentence chunks),
# WikiText 0.515 (2%), wrapped books read with --sentences prose 0.532 (6%); the same
# books read with lines or split, a paragraph per document, 0.648-0.661 (30-33%).
RANDOM_FRACTION_WARNING = 0.625
# Rows shorter than half the target waste half of every sequence the model is fed; the
# measured layouts above give 90-95% of the target at 128 and 68-74% at 512.
MEAN_LENGTH_WARNING = 0.5


# What a row's label counts, by pairing (FULL-SENTENCES rows have none).
LABEL_NAMES = {"nsp": "NSP random B", "sop": "SOP swapped"}


def rows_label(pairs: str) -> str:
    """What a warning calls a build's rows: "NSP pairs", "SOP pairs" or "FULL-SENTENCES rows"."""
    return {"nsp": "NSP pairs", "sop": "SOP pairs"}.get(pairs, "FULL-SENTENCES rows")


@dataclass(frozen=True)
class PairFigures:
    documents: int
    sentences: int
    corpus_tokens: int
    chunks: int  # over all dupe passes; 0 when not recorded
    single_sentence_chunks: int
    rows: int
    next_sentence_random: int
    mean_length: float
    max_seq_length: int
    pairs: str = "nsp"  # the pairing: nsp, sop or none (instances.PAIRINGS)

    @property
    def random_fraction(self) -> float:
        return self.next_sentence_random / self.rows if self.rows else 0.0

    @property
    def single_sentence_share(self) -> float | None:
        return self.single_sentence_chunks / self.chunks if self.chunks else None

    @property
    def sentences_per_document(self) -> float:
        return self.sentences / self.documents if self.documents else 0.0

    @property
    def tokens_per_document(self) -> float:
        return self.corpus_tokens / self.documents if self.documents else 0.0

    @property
    def tokens_per_sentence(self) -> float:
        return self.corpus_tokens / self.sentences if self.sentences else 0.0

    def degenerate(self) -> bool:
        if not self.rows:
            return False
        short = self.mean_length < MEAN_LENGTH_WARNING * self.max_seq_length
        return short or (self.pairs == "nsp" and self.random_fraction >= RANDOM_FRACTION_WARNING)

    @property
    def label(self) -> str:
        return rows_label(self.pairs)

    def describe(self) -> str:
        """"NSP random B 0.653, 30.6% single-sentence chunks, 21,718 documents of 6.1
        sentences (52 tokens) on average, mean row length 57.0 of 128"; SOP pairs give
        their swapped fraction instead, FULL-SENTENCES rows (no label, no chunks) neither."""
        single = self.single_sentence_share
        expected = {"nsp": "about 0.5 expected", "sop": "0.5 expected"}
        label = ([f"{LABEL_NAMES[self.pairs]} {self.random_fraction:.3f} ({expected[self.pairs]})"]
                 if self.pairs in LABEL_NAMES else [])
        return ", ".join(
            label
            + ([f"{single:.1%} single-sentence chunks"] if single is not None and self.pairs != "none" else [])
            + [f"{plural(self.documents, 'document')} of {self.sentences_per_document:,.1f} sentences "
               f"({self.tokens_per_document:,.0f} tokens) on average",
               f"mean row length {self.mean_length:.1f} of {self.max_seq_length}"]
        )

    def as_dict(self) -> dict:
        return {**asdict(self), "random_fraction": self.random_fraction,
                "single_sentence_share": self.single_sentence_share,
                "sentences_per_document": self.sentences_per_document,
                "tokens_per_document": self.tokens_per_document, "degenerate": self.degenerate()}


def figures(totals: dict, rows: int, next_sentence_random: int, mean_length: float, max_seq_length: int,
            pairs: str = "nsp") -> PairFigures:
    """PairFigures from a manifest's "totals" (or the same sums over partitions) and the
    rows' own counts, for a build of pairing `pairs`."""
    return PairFigures(
        documents=totals["documents"], sentences=totals["sentences"], corpus_tokens=totals["corpus_tokens"],
        chunks=totals.get("chunks", 0), single_sentence_chunks=totals.get("single_sentence_chunks", 0),
        rows=rows, next_sentence_random=next_sentence_random, mean_length=mean_length,
        max_seq_length=max_seq_length, pairs=pairs,
    )


def likely_cause(f: PairFigures, sentences: str, separator: str | None) -> str:
    """What probably made the documents (or rows) short, and the option that helps.
    FULL-SENTENCES rows cross documents, so for them only long sentences or a small
    corpus can."""
    target = f.max_seq_length - 3
    if f.sentences == f.documents and f.pairs != "none":
        consequence = "no pair can be is-next" if f.pairs == "nsp" else "every pair splits a sentence"
        if sentences == "lines":
            return (f"every document is one sentence, so {consequence}; if each line is a paragraph, "
                    "use --sentences split, and for hard-wrapped books or articles --sentences prose")
        return f"every document is one sentence, so {consequence}"
    if f.tokens_per_sentence >= target / 2:
        hint = "; if a line holds a whole paragraph, use --sentences split" if sentences == "lines" else ""
        return (f"sentences are long (mean {f.tokens_per_sentence:,.0f} tokens) next to --max-seq-length "
                f"{f.max_seq_length}, so most {'rows' if f.pairs == 'none' else 'chunks'} are one sentence{hint}")
    if f.pairs == "none":
        return (f"the corpus is small ({f.corpus_tokens:,} tokens in {f.rows:,} rows): the last row of each "
                "partition is only partly filled")
    short = f"documents are short ({f.tokens_per_document:,.0f} tokens on average, next to a target of {target})"
    if sentences != "prose":
        return (f"{short}; if each paragraph became a document (hard-wrapped books or articles read with "
                f"--sentences {sentences}), use --sentences prose (a document per file, or per "
                "--document-separator section)")
    if separator:
        return f"{short}: --document-separator matches often; one that matches less often gives longer documents"
    return (f"{short}: the input files (or records) are short; if they are short texts by nature "
            "(posts, titles), a smaller --max-seq-length wastes less")


def degenerate_pairs_warning(f: PairFigures, sentences: str, separator: str | None) -> str | None:
    """The one warning for a build whose pairs degenerate, or None."""
    if not f.degenerate():
        return None
    return f"the {f.label} degenerate: {f.describe()}; likely cause: {likely_cause(f, sentences, separator)}"
