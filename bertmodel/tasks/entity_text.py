"""A raw text's words and entities as transformers' token-classification pipeline finds
them: the text tokenized whole and cut into words (text_word_pieces), and the words'
predicted labels grouped into entities (group_entities). `bertmodel predict` on a
token-classification run's raw texts (tasks/tokens.py) gives what the pipeline gives."""
from __future__ import annotations

import numpy as np

from bertprep.tokenizer import span_end


def group_entities(words: list[tuple[int, int]], labels: list[str], scores: list[float], text: str) -> list[dict]:
    """Entities of one text from its words' (start, end) characters, labels and scores,
    grouped as transformers' token-classification pipeline groups words: a word joins
    the entity before it when it has the same type and is not a B- tag; O is dropped;
    an entity's score is the mean of its words' scores."""
    entities, current = [], None
    for (start, end), label, score in zip(words, labels, scores):
        bi, kind = ("B", label[2:]) if label.startswith("B-") else ("I", label[2:]) if label.startswith("I-") \
            else ("I", label)
        if current is not None and kind == current["kind"] and bi != "B":
            current["end"] = end
            current["scores"].append(score)
            continue
        current = {"kind": kind, "start": start, "end": end, "scores": [score]}
        entities.append(current)
    return [{"entity_group": e["kind"], "score": float(np.mean(e["scores"])), "word": text[e["start"]:e["end"]],
             "start": e["start"], "end": e["end"]} for e in entities if e["kind"] != "O"]


def text_word_pieces(tok, text: str) -> tuple[list[tuple[int, int]], list[np.ndarray]]:
    """The words of `text` as transformers' token-classification pipeline reads them (the
    text tokenized whole, as the pipeline's tokenizer does): each word's (start, end)
    characters in `text` and its token ids. Which tokens start a word:

    - WordPiece: the pre-tokenizer's words (`word_ids`: a first piece and its "##"
      pieces, what the pipeline finds by comparing each token with its text);
    - any other model with a continuing-subword prefix: the pipeline's test, a token
      whose text is as long as the token;
    - byte-level BPE and SentencePiece (no such prefix): the pipeline's fallback, a token
      at the text's start or with a space just before or at its start; an unknown token
      always starts a word.

    A word's characters leave out the whitespace at its ends (the space ModernBERT's Ġ and
    SentencePiece's ▁ tokens carry is inside their offsets, and transformers' pipeline
    reports it as part of the entity; RoBERTa's offsets are trimmed already) and reach
    past the marks accent stripping deleted, so an entity is the user's whole word."""
    encoding = tok.tokenizer.encode(text, add_special_tokens=False)
    prefix = getattr(tok.tokenizer.model, "continuing_subword_prefix", None)
    words: list[list[int]] = []  # [start, end, first token, end token]
    previous_word = None
    for t, (token_id, token, (start, end), word, special) in enumerate(zip(
            encoding.ids, encoding.tokens, encoding.offsets, encoding.word_ids, encoding.special_tokens_mask)):
        if special:  # an added special token in the text: the pipeline skips it
            continue
        if tok.kind == "wordpiece":
            starts = word != previous_word
        elif prefix:
            starts = len(token) == len(text[start:end])
        else:
            starts = start == 0 or " " in text[start - 1:start + 1] or token_id == tok.special.unk
        previous_word = word
        if starts or not words:
            words.append([start, end, t, t + 1])
        else:
            words[-1][1], words[-1][3] = end, t + 1
    ids = np.asarray(encoding.ids, np.int32)
    spans = [_inside_space(text, s, e) for s, e, _, _ in words]
    return [(s, span_end(text, e)) for s, e in spans], [ids[a:b] for _, _, a, b in words]


def _inside_space(text: str, start: int, end: int) -> tuple[int, int]:
    """(start, end) moved inside the whitespace at either end, as RobertaProcessing's
    trim_offsets moves a token's (a word of whitespace alone keeps an empty span at its
    end). WordPiece tokens hold no whitespace: nothing moves."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def text_words(tok, text: str) -> list[tuple[int, int]]:
    """The (start, end) characters of each word of `text` (text_word_pieces)."""
    return text_word_pieces(tok, text)[0]
