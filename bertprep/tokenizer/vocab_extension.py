"""What makes one tokenizer an extension of another, and the base's pieces of a new token.

An extension (what `bertprep extend-tokenizer` writes) keeps every id of its base with
the same token, so a model trained with the base reads every base id as it always did.
Two kinds of ids may hold a token the base does not have:

- ids after the base's last one (the added tokens), and
- the base's reserved slots, `[unusedK]` (BERT's vocab.txt, ModernBERT's added tokens),
  which no text ever produces: `--reuse-unused` gives them new tokens, keeping their ids.

The normalisation and the model kind must be the base's too: a WordPiece extension that
lower-cased where its base kept case would encode base words into other ids.

`base_pieces` gives the base tokenizer's pieces of a new token's text, as the model's
growth averages their embeddings for the new row (bertmodel/tasks/vocab_growth.py): for
WordPiece the greedy longest match of the token (a `##` token as a continuation, as it
occurs), for BPE and Unigram the base model's own tokenization of the token's string
(already in the model's alphabet: `Ġ`, `▁`).
"""
from __future__ import annotations

import re

from bertprep.errors import BertprepError
from bertprep.tokenizer.files import LoadedTokenizer

UNUSED_SLOT = re.compile(r"\[unused\d+\]")
CONTINUATION = "##"  # WordPiece's prefix of a piece that continues a word (files.py's pipeline)


def is_unused_slot(token: str | None) -> bool:
    """A reserved slot (`[unused7]`) that text never produces and an extension may rename."""
    return token is not None and UNUSED_SLOT.fullmatch(token) is not None


def new_token_ids(base: LoadedTokenizer, extended: LoadedTokenizer, where: str, base_where: str) -> list[int]:
    """The ids of `extended` whose token is not the base's: renamed unused slots (ascending),
    then every id after the base's. Raises BertprepError in one line when `extended` is not
    an extension of `base`: another kind or normalisation, fewer tokens, or a base id whose
    token changed (the first one named)."""
    if extended.kind != base.kind:
        raise BertprepError(f"{where}: a {extended.kind} tokenizer, not an extension of {base_where} "
                            f"(a {base.kind} one)")
    if (extended.lowercase, extended.strip_accents) != (base.lowercase, base.strip_accents):
        raise BertprepError(f"{where}: not an extension of {base_where}: it normalises otherwise "
                            f"(lowercase {extended.lowercase}, strip_accents {extended.strip_accents}; the base: "
                            f"{base.lowercase}, {base.strip_accents})")
    if extended.vocab_size < base.vocab_size:
        raise BertprepError(f"{where}: {extended.vocab_size:,} tokens, fewer than the {base.vocab_size:,} of "
                            f"{base_where}: not an extension of it")
    renamed = []
    for i, (old, new) in enumerate(zip(base.vocab, extended.vocab)):
        if old == new:
            continue
        if not is_unused_slot(old):
            raise BertprepError(f"{where}: not an extension of {base_where}: id {i:,} is {new!r}, "
                                f"the base's is {old!r}")
        renamed.append(i)
    return renamed + list(range(base.vocab_size, extended.vocab_size))


def base_pieces(base: LoadedTokenizer, tokens: list[str]) -> list[list[int]]:
    """The base's ids for the text of each of `tokens` (tokens of an extension; module
    docstring). A text the base cannot spell gives its unknown token, where it has one."""
    unknown = [] if base.special.unk is None else [base.special.unk]
    if base.kind == "wordpiece":
        ids = base.tokenizer.get_vocab(with_added_tokens=False)
        return [[ids[piece] for piece in wordpiece_split(ids, token) or ()] or unknown for token in tokens]
    return [[piece.id for piece in base.tokenizer.model.tokenize(token)] or unknown for token in tokens]


def wordpiece_split(vocab, token: str) -> list[str] | None:
    """WordPiece's greedy longest match of `token` over `vocab` (any container of tokens);
    a `##` token is matched as the rest of a word (every piece a `##` piece), as it occurs
    in text. None where a character has no piece (WordPiece makes the word [UNK])."""
    continues = token.startswith(CONTINUATION) and len(token) > len(CONTINUATION)
    text = token[len(CONTINUATION):] if continues else token
    pieces, start = [], 0
    while start < len(text):
        prefix = CONTINUATION if continues or start > 0 else ""
        end = len(text)
        while end > start and prefix + text[start:end] not in vocab:
            end -= 1
        if end == start:
            return None
        pieces.append(prefix + text[start:end])
        start = end
    return pieces
