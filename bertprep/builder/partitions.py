"""Partitions tokenized, and cached by content.

Partitions are planned by content (bertprep/builder/plan.py: a byte budget, in input order),
never "one per worker", so the partition list and everything derived from it is the
same whatever `--workers` is (DESIGN.md, "Determinism and scale"). A partition is
identified by its index and by a hash of its text; the tokenized form is cached under
(text hash, tokenizer fingerprint), so a second build with other pairing or masking
options, or another seed, does not tokenize again.

A partition of a tokenizer other than WordPiece also holds each token's word start, and
its sentences after a document's first were encoded with the space before them
(tokenizer/encoding.py): its entries are keyed with WORDS_LAYOUT too, so an entry
written without them is never read as one.
"""
from __future__ import annotations

import hashlib
import io

import numpy as np

from bertprep.storage import stores as storage
from bertprep.storage import write_bytes_atomic
from bertprep.tokenizer import SentenceEncoder
from bertprep.instances import TokenizedPartition

CACHE_FORMAT = 1
WORDS_LAYOUT = "words-1"  # the key's mark of a partition with word starts (not WordPiece)


def hash_documents(documents: list[list[str]]) -> str:
    """blake2b of a partition's content, document and sentence boundaries included: the
    key of its tokens in the cache."""
    digest = hashlib.blake2b(digest_size=20)
    for doc in documents:
        # \x1e / \x1f cannot survive corpus reading's stripping inside a sentence
        # boundary, so the encoding of the structure is unambiguous.
        digest.update("\x1f".join(doc).encode("utf-8", "surrogatepass"))
        digest.update(b"\x1e")
    return digest.hexdigest()


def text_bytes(documents: list[list[str]]) -> int:
    """UTF-8 bytes of the sentences, a newline each: the partition's text size."""
    return sum(len(s.encode("utf-8", "surrogatepass")) + 1 for doc in documents for s in doc)


def tokenize_documents(documents: list[list[str]], encoder: SentenceEncoder):
    """Tokenize a partition. Sentences that tokenize to nothing vanish and documents
    left empty are dropped, as in the reference."""
    encoded = encoder.encode_documents(documents)
    lengths = np.diff(encoded.offsets)
    doc_sizes = np.fromiter((len(d) for d in documents), dtype=np.int64, count=len(documents))
    doc_of_sentence = np.repeat(np.arange(len(documents)), doc_sizes)
    keep = lengths > 0
    kept_per_doc = np.bincount(doc_of_sentence[keep], minlength=len(documents))
    kept_per_doc = kept_per_doc[kept_per_doc > 0]
    sentence_offsets = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
    np.cumsum(lengths[keep], out=sentence_offsets[1:])
    document_offsets = np.zeros(len(kept_per_doc) + 1, dtype=np.int64)
    np.cumsum(kept_per_doc, out=document_offsets[1:])
    # Empty sentences contribute no ids, so the flat id array is already right.
    part = TokenizedPartition(encoded.ids, sentence_offsets, document_offsets, encoded.word_starts)
    return part, encoded


class TokenCache:
    """Tokenized partitions on disk or an object store, one .npz per (text hash, tokenizer);
    `word_starts`: the partitions hold them (tokenizers other than WordPiece)."""

    def __init__(self, directory, word_starts: bool = False):
        self.directory = storage.path(directory)
        self.word_starts = word_starts

    def path(self, text_hash: str, tokenizer_fingerprint: str):
        layout = f"{WORDS_LAYOUT}:" if self.word_starts else ""  # WordPiece keys are as they always were
        key = hashlib.blake2b(
            f"{CACHE_FORMAT}:{layout}{tokenizer_fingerprint}:{text_hash}".encode(), digest_size=20
        ).hexdigest()
        return self.directory / key[:2] / f"{key}.npz"

    def has(self, text_hash: str, tokenizer_fingerprint: str) -> bool:
        return self.path(text_hash, tokenizer_fingerprint).is_file()

    def load(self, text_hash: str, tokenizer_fingerprint: str) -> TokenizedPartition | None:
        path = self.path(text_hash, tokenizer_fingerprint)
        try:
            with storage.open_whole(path) as file, np.load(file) as data:
                starts = data["word_starts"] if self.word_starts else None
                return TokenizedPartition(data["ids"], data["sentence_offsets"], data["document_offsets"], starts)
        except (FileNotFoundError, OSError, ValueError, KeyError):
            return None  # missing or damaged: tokenize again

    def save(self, text_hash: str, tokenizer_fingerprint: str, part: TokenizedPartition) -> None:
        path = self.path(text_hash, tokenizer_fingerprint)
        path.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        arrays = dict(ids=part.ids, sentence_offsets=part.sentence_offsets, document_offsets=part.document_offsets)
        if self.word_starts:
            arrays["word_starts"] = part.word_starts
        np.savez(buffer, **arrays)
        write_bytes_atomic(path, buffer.getbuffer(), fsync=False)
