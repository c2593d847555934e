"""Bulk encoding of a partition's sentences, checked against `tokenizers`.

`tokenizers` is the reference; `nanotoken` (optional extra `bertprep[fast]`) reads the
same tokenizer.json and is ~35x faster. Because nanotoken is young, every partition it
encodes is spot-checked: a deterministic sample of its sentences is re-encoded with
`tokenizers`, and on any difference the whole partition is encoded with `tokenizers`
instead (and the caller is told, so it can warn). Output is therefore the `tokenizers`
output whichever engine runs, and the shards are the same bytes with or without
nanotoken.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


@dataclass
class EncodedSentences:
    ids: np.ndarray  # (T,) uint32 flat ids
    offsets: np.ndarray  # (S + 1,) int64
    engine: str  # "nanotoken" or "tokenizers"
    mismatches: int = 0  # sampled sentences where nanotoken differed (then engine = tokenizers)


class SentenceEncoder:
    """Encodes lists of sentences without special tokens."""

    def __init__(self, tok: LoadedTokenizer, engine: str = "auto"):
        self.tok = tok
        self._fast = None
        if engine not in ("auto", "nanotoken", "tokenizers"):
            raise ValueError(f"unknown encoding engine {engine!r}")
        if engine == "nanotoken" or (engine == "auto" and nanotoken_available()):
            import nanotoken

            # No added tokens in this JSON: literal "[MASK]" in text is text, as in
            # Google's tokenizer and our `tokenizers` pipeline (encode_special_tokens).
            self._fast = nanotoken.Tokenizer.from_json(tok.encoder_json())

    @property
    def engine(self) -> str:
        return "nanotoken" if self._fast is not None else "tokenizers"

    def encode_reference(self, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
        lengths = np.zeros(len(sentences), dtype=np.int64)
        pieces: list[np.ndarray] = []
        start = 0
        while start < len(sentences):
            end, chars = start, 0
            while end < len(sentences) and (end == start or chars + len(sentences[end]) <= REFERENCE_BATCH_CHARS):
                chars += len(sentences[end])
                end += 1
            encodings = self.tok.tokenizer.encode_batch(sentences[start:end], add_special_tokens=False)
            for k, encoding in enumerate(encodings):
                ids = np.asarray(encoding.ids, dtype=np.uint32)
                lengths[start + k] = len(ids)
                pieces.append(ids)
            del encodings
            start = end
        offsets = np.zeros(len(sentences) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint32)
        return ids, offsets

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
