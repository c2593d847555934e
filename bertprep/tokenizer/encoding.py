"""Bulk encoding of a partition's sentences, checked against `tokenizers`.

`tokenizers` is the reference; `nanotoken` (optional extra `bertprep[fast]`) reads the
same tokenizer.json and is ~35x faster. Because nanotoken is young, every partition it
encodes is spot-checked: a deterministic sample of its sentences is re-encoded with
`tokenizers`, and on any difference the whole partition is encoded with `tokenizers`
instead (and the caller is told, so it can warn). Output is therefore the `tokenizers`
output whichever engine runs, and the shards are the same bytes with or without
nanotoken. nanotoken reads WordPiece only: other kinds are always encoded by
`tokenizers` (engine "auto" picks it for them).

Corpus documents (`encode_documents`, what build-shards tokenizes) are encoded with the
tokenizer's text pipeline (`text_tokenizer()`: a literal "<mask>" in a document is
text), and for kinds other than WordPiece two more things hold:

- A sentence that is not the first of its document followed a space in the original
  text. A byte-level BPE whose pre-tokenizer adds no prefix space (RoBERTa, ModernBERT)
  writes that space into the word's first token (`Ġworld`, not `world`), so such a
  sentence is encoded as " " + sentence: a document's tokens are then exactly the
  tokenizer's encoding of its sentences joined by spaces, as a model meets running
  text. Whether the space counts is asked of the tokenizer (" a" against "a"), so a
  pipeline that adds its own (SentencePiece's Metaspace, `add_prefix_space`) is left
  as it is, and WordPiece, which drops spaces, is never touched.
- Each token says whether it begins a word (`word_starts`, from `Encoding.word_ids`:
  the pre-tokenizer's words), for whole-word masking. WordPiece's words are its "##"
  pieces, read from the vocabulary, as they always were.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bertprep.errors import BertprepError
from bertprep.tokenizer.files import LoadedTokenizer

SAMPLE_SENTENCES = 512  # sentences re-encoded with tokenizers per partition
SAMPLE_CHARS = 2_000_000  # ... but at most about this much text (one sentence at least)
# `tokenizers` keeps ~100 bytes per token in its Encoding objects (tokens, offsets,
# masks), so the reference encoder works through batches of about this much text and
# keeps only the ids: memory follows the batch, not the partition.
REFERENCE_BATCH_CHARS = 1_000_000


def nanotoken_available() -> bool:
    try:
        import nanotoken  # noqa: F401
    except ImportError:
        return False
    return True


def continues_after_space(tok: LoadedTokenizer, text=None) -> bool:
    """Whether a sentence inside a document is encoded with the space before it (module
    docstring): not WordPiece, and the tokenizer (`text`: its text pipeline, when made
    already) tells " a" from "a"."""
    if tok.kind == "wordpiece":
        return False
    text = text or tok.text_tokenizer()
    return text.encode(" a", add_special_tokens=False).ids != text.encode("a", add_special_tokens=False).ids


@dataclass
class EncodedSentences:
    ids: np.ndarray  # (T,) uint32 flat ids
    offsets: np.ndarray  # (S + 1,) int64
    engine: str  # "nanotoken" or "tokenizers"
    mismatches: int = 0  # sampled sentences where nanotoken differed (then engine = tokenizers)
    word_starts: np.ndarray | None = None  # (T,) bool, when asked for: the token begins a word


class SentenceEncoder:
    """Encodes lists of sentences without special tokens."""

    def __init__(self, tok: LoadedTokenizer, engine: str = "auto"):
        self.tok = tok
        self._fast = None
        self._text = None  # the corpus-text pipeline, made when encode_documents first needs it
        if engine not in ("auto", "nanotoken", "tokenizers"):
            raise ValueError(f"unknown encoding engine {engine!r}")
        # nanotoken reads WordPiece pipelines only (encoder_json); "auto" falls back to
        # `tokenizers` for every other kind rather than failing.
        wordpiece = tok.kind == "wordpiece"
        if engine == "nanotoken" or (engine == "auto" and wordpiece and nanotoken_available()):
            import nanotoken

            # No added tokens in this JSON: literal "[MASK]" in text is text, as in
            # Google's tokenizer and our `tokenizers` pipeline (encode_special_tokens).
            self._fast = nanotoken.Tokenizer.from_json(tok.encoder_json())

    @property
    def engine(self) -> str:
        return "nanotoken" if self._fast is not None else "tokenizers"

    def encode_documents(self, documents: list[list[str]]) -> EncodedSentences:
        """Every sentence of `documents`, in order, as corpus text (module docstring):
        for kinds other than WordPiece with the space before a document's later sentences
        where the tokenizer marks it, and with word starts."""
        if self.tok.kind == "wordpiece":
            return self.encode([s for doc in documents for s in doc])
        if self._text is None:
            text = self.tok.text_tokenizer()
            self._text = (text, continues_after_space(self.tok, text))
        pipeline, space = self._text
        sentences = [(" " + s if space and k else s) for doc in documents for k, s in enumerate(doc)]
        ids, offsets, starts = self.encode_reference(sentences, pipeline, word_starts=True)
        self._check_no_specials(ids)
        return EncodedSentences(ids, offsets, "tokenizers", word_starts=starts)

    def _check_no_specials(self, ids: np.ndarray) -> None:
        """Rows find their template tokens by id and never mask them: corpus text must
        yield none (an unknown character's [UNK] aside). text_tokenizer() sees to it for
        the kinds we know; a pipeline that still makes one is refused, not written."""
        specials = np.asarray(sorted(set(self.tok.special_token_ids) - {self.tok.special.unk}), dtype=ids.dtype)
        found = ids[np.isin(ids, specials)]
        if len(found):
            where = self.tok.source if self.tok.source is not None else "tokenizer"
            raise BertprepError(f"{where}: its pipeline turns corpus text into the special token "
                                f"{self.tok.vocab[int(found[0])]!r} (id {int(found[0])}); rows could not tell it "
                                f"from their own")

    def encode_reference(self, sentences: list[str], pipeline=None, word_starts: bool = False):
        """(ids, offsets) by `tokenizers` (`pipeline`, default the tokenizer's own); with
        `word_starts`, (ids, offsets, word starts)."""
        pipeline = pipeline or self.tok.tokenizer
        lengths = np.zeros(len(sentences), dtype=np.int64)
        pieces: list[np.ndarray] = []
        words: list[np.ndarray] = []
        start = 0
        while start < len(sentences):
            end, chars = start, 0
            while end < len(sentences) and (end == start or chars + len(sentences[end]) <= REFERENCE_BATCH_CHARS):
                chars += len(sentences[end])
                end += 1
            encodings = pipeline.encode_batch(sentences[start:end], add_special_tokens=False)
            for k, encoding in enumerate(encodings):
                ids = np.asarray(encoding.ids, dtype=np.uint32)
                lengths[start + k] = len(ids)
                pieces.append(ids)
                if word_starts:
                    words.append(_word_starts(encoding.word_ids))
            del encodings
            start = end
        offsets = np.zeros(len(sentences) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint32)
        if not word_starts:
            return ids, offsets
        return ids, offsets, np.concatenate(words) if words else np.zeros(0, dtype=bool)

    def encode(self, sentences: list[str]) -> EncodedSentences:
        if self._fast is None:
            ids, offsets = self.encode_reference(sentences)
            return EncodedSentences(ids, offsets, "tokenizers")
        ragged = self._fast.encode_batch(sentences, add_special_tokens=False)
        ids = np.asarray(ragged.ids, dtype=np.uint32)
        offsets = np.asarray(ragged.offsets, dtype=np.int64)
        mismatches = self._count_mismatches(sentences, ids, offsets)
        if mismatches:
            ids, offsets = self.encode_reference(sentences)
            return EncodedSentences(ids, offsets, "tokenizers", mismatches)
        return EncodedSentences(ids, offsets, "nanotoken")

    def _count_mismatches(self, sentences, ids, offsets) -> int:
        # Evenly spaced sample plus the longest sentences, where engines are likeliest to
        # disagree (long words, odd characters).
        n = len(sentences)
        if n == 0:
            return 0
        step = max(1, n // SAMPLE_SENTENCES)
        lengths = np.diff(offsets)
        longest = np.argsort(-lengths, kind="stable")[:16]
        # The longest first, then the evenly spaced ones, within a text budget: a
        # partition of a few huge lines must not be encoded twice in full.
        chosen, chars = [], 0
        for i in dict.fromkeys([*longest.tolist(), *range(0, n, step)]):
            if chosen and chars + len(sentences[i]) > SAMPLE_CHARS:
                continue
            chosen.append(i)
            chars += len(sentences[i])
        sample = sorted(chosen)
        ref_ids, ref_offsets = self.encode_reference([sentences[i] for i in sample])
        bad = 0
        for k, i in enumerate(sample):
            ours = ids[offsets[i] : offsets[i + 1]]
            theirs = ref_ids[ref_offsets[k] : ref_offsets[k + 1]]
            bad += not np.array_equal(ours, theirs)
        return bad


def _word_starts(word_ids: list) -> np.ndarray:
    """(n,) bool from one encoding's word ids: a token begins a word where its word id
    differs from the token before it (a token with no word, None, is a word of its own)."""
    ids = np.asarray([-1 - k if w is None else w for k, w in enumerate(word_ids)] if None in word_ids else word_ids,
                     dtype=np.int64)
    starts = np.ones(len(ids), dtype=bool)
    starts[1:] = ids[1:] != ids[:-1]
    return starts
