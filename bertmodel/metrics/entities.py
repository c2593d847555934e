"""Entity-level scores of token classification (NER), as CoNLL's `conlleval` computes them.

`conlleval` (Tjong Kim Sang, version 2004-01-26, the script of the CoNLL-2000 chunking
and CoNLL-2002/2003 NER shared tasks) reads one tag per token and finds chunks with two
rules over each pair of neighbouring tags (previous, current), each split at its first
hyphen into a chunk tag and a type ("B-PER" -> "B", "PER"; a tag without a hyphen, "O"
or "PER", is all chunk tag with the empty type):

- startOfChunk: a chunk starts at the current tag after B/B, I/B, O/B, O/I, E/E, E/I,
  O/E, or when the current tag is not O (nor ".") and its type differs from the
  previous one's; "[" and "]" are one-token chunks;
- endOfChunk: the previous chunk ends before the current tag after B/B, B/O, I/B, I/O,
  E/E, E/I, E/O, or when the previous tag is not O (nor ".") and the types differ.

So I-X after O or after another type starts a chunk (IOB1 and IOB2 read alike), B-X
after B, I or O starts one (not after E- of its own type), and S-/L-/U- have no rule of
their own: conlleval does not know BIOES/BILOU (S-X S-X is one chunk to it), so convert
such tags with `to_iob2` first. A tag without a hyphen ("PER") is not read as I-PER: its
type is empty, so after O it starts nothing (conlleval counts no chunk there), and after
a typed tag it starts a chunk of type "" (reported under that name, as conlleval prints
it). Option `-r` is not modelled (raw mode would prefix every such tag with B-).

A chunk counts as correct when gold and prediction start one at the same token with the
same type and both end before the same token (`entity_metrics` runs conlleval's
counting loop itself, sentence boundaries included, so its numbers equal the script's on
any input); for tags of the form O or prefix-type this is "same span and same type" over
`entity_spans`. Precision, recall and F1 are micro over all chunks and per type, 0.0
where a denominator is 0 (what conlleval prints); accuracy is the fraction of tokens
whose predicted tag equals the gold one. Fractions, not conlleval's percentages.
"""
from __future__ import annotations

from collections import Counter

SCHEMES = ("IOB1", "IOB2", "BIOES")

# Prefixes each scheme may write; BIOES also takes BILOU's L(ast) and U(nit) for E and S.
_SCHEME_PREFIXES = {"IOB1": "BI", "IOB2": "BI", "BIOES": "BIESLU"}
_CLOSING = frozenset("ESLU")  # BIOES/BILOU prefixes after which no entity goes on
_OPENING = frozenset("BSU")   # BIOES/BILOU prefixes that always begin an entity

_OUTSIDE = ("O", "")  # conlleval's (tag, type) before a sentence and at its boundary lines

# conlleval's (previous, current) chunk-tag pairs of endOfChunk and startOfChunk.
_END_PAIRS = frozenset({("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"), ("E", "E"), ("E", "I"), ("E", "O")})
_START_PAIRS = frozenset({("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"), ("E", "E"), ("E", "I"), ("O", "E")})


def _split(tag: str) -> tuple[str, str]:
    """conlleval's split (the "20040126 ET" regex /^([^-]*)-(.*)$/): chunk tag before the
    first hyphen, type after it (types may hold hyphens); no hyphen: all tag, type ""."""
    chunk_tag, hyphen, chunk_type = tag.partition("-")
    return (chunk_tag, chunk_type) if hyphen else (tag, "")


def _end_of_chunk(previous: tuple[str, str], current: tuple[str, str]) -> bool:
    """conlleval's endOfChunk: did a chunk end between the previous and current tag?"""
    (prev_tag, prev_type), (tag, chunk_type) = previous, current
    return ((prev_tag, tag) in _END_PAIRS
            or (prev_tag not in ("O", ".") and prev_type != chunk_type)
            or prev_tag in ("[", "]"))  # "corrected 1998-12-22": bracket chunks have length 1


def _start_of_chunk(previous: tuple[str, str], current: tuple[str, str]) -> bool:
    """conlleval's startOfChunk: did a chunk start at the current tag?"""
    (prev_tag, prev_type), (tag, chunk_type) = previous, current
    return ((prev_tag, tag) in _START_PAIRS
            or (tag not in ("O", ".") and prev_type != chunk_type)
            or tag in ("[", "]"))


def entity_spans(tags: list[str]) -> list[tuple[str, int, int]]:
    """(type, start, end_exclusive) of each chunk of one sentence, by conlleval's rules.

    A chunk runs from a token where startOfChunk holds up to the first later token where
    endOfChunk or startOfChunk holds (a new chunk closes the open one), or to the end of
    the sentence (conlleval's boundary line). ["B-PER", "I-PER", "I-LOC"] ->
    [("PER", 0, 2), ("LOC", 2, 3)]."""
    spans, open_type, open_start = [], None, 0
    previous = _OUTSIDE
    for position, tag in enumerate(tags):
        current = _split(tag)
        starts = _start_of_chunk(previous, current)
        if open_type is not None and (starts or _end_of_chunk(previous, current)):
            spans.append((open_type, open_start, position))
            open_type = None
        if starts:
            open_type, open_start = current[1], position
        previous = current
    if open_type is not None:
        spans.append((open_type, open_start, len(tags)))
    return spans


def _check_lengths(gold: list[list[str]], pred: list[list[str]]) -> None:
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold sentences but {len(pred)} predicted ones")
    for index, (gold_tags, pred_tags) in enumerate(zip(gold, pred)):
        if len(gold_tags) != len(pred_tags):
            raise ValueError(f"sentence {index}: {len(gold_tags)} gold tags but {len(pred_tags)} predicted")


def _conlleval_counts(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """conlleval's main loop over every token, a boundary line (O, O, not a token) after
    each sentence as in its input files: chunks found in gold and prediction per type,
    correct chunks per type, tokens and correctly tagged tokens."""
    found_gold, found_pred, correct = Counter(), Counter(), Counter()
    tokens = correct_tags = 0
    last_gold = last_pred = _OUTSIDE
    in_correct = False  # the chunk both sides are in has matched so far
    for gold_tags, pred_tags in zip(gold, pred):
        for gold_tag, pred_tag in [*zip(gold_tags, pred_tags), (None, None)]:
            is_boundary = gold_tag is None
            now_gold = _OUTSIDE if is_boundary else _split(gold_tag)
            now_pred = _OUTSIDE if is_boundary else _split(pred_tag)
            if in_correct:
                gold_ends = _end_of_chunk(last_gold, now_gold)
                pred_ends = _end_of_chunk(last_pred, now_pred)
                if gold_ends and pred_ends and last_gold[1] == last_pred[1]:
                    in_correct = False
                    correct[last_gold[1]] += 1
                elif gold_ends != pred_ends or now_gold[1] != now_pred[1]:
                    in_correct = False
            gold_starts = _start_of_chunk(last_gold, now_gold)
            pred_starts = _start_of_chunk(last_pred, now_pred)
            if gold_starts and pred_starts and now_gold[1] == now_pred[1]:
                in_correct = True
            found_gold[now_gold[1]] += gold_starts
            found_pred[now_pred[1]] += pred_starts
            if not is_boundary:
                tokens += 1
                correct_tags += now_gold == now_pred  # tag and type both equal
            last_gold, last_pred = now_gold, now_pred
    if in_correct:  # the input ended inside a matching chunk
        correct[last_gold[1]] += 1
    return {"found_gold": +found_gold, "found_pred": +found_pred, "correct": correct,
            "tokens": tokens, "correct_tags": correct_tags}


def _scores(correct: int, predicted: int, support: int) -> tuple[float, float, float]:
    precision = correct / predicted if predicted else 0.0
    recall = correct / support if support else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def entity_metrics(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """conlleval's entity precision/recall/F1 (micro and per type) and token accuracy of
    predicted tag sequences against gold ones, sentence by sentence; see the module
    docstring. Sentences must pair up with equal lengths (ValueError otherwise)."""
    _check_lengths(gold, pred)
    counts = _conlleval_counts(gold, pred)
    found_gold, found_pred, correct = counts["found_gold"], counts["found_pred"], counts["correct"]
    precision, recall, f1 = _scores(sum(correct.values()), found_pred.total(), found_gold.total())
    per_type = {}
    for chunk_type in sorted(found_gold.keys() | found_pred.keys()):  # conlleval's @sortedTypes
        type_precision, type_recall, type_f1 = _scores(
            correct[chunk_type], found_pred[chunk_type], found_gold[chunk_type])
        per_type[chunk_type] = {"precision": type_precision, "recall": type_recall, "f1": type_f1,
                                "support": found_gold[chunk_type], "predicted": found_pred[chunk_type]}
    tokens = counts["tokens"]
    return {"precision": precision, "recall": recall, "f1": f1,
            # conlleval prints no accuracy without tokens; 0.0 like its other empty scores
            "accuracy": counts["correct_tags"] / tokens if tokens else 0.0,
            "per_type": per_type,
            "entities": found_gold.total(), "predicted_entities": found_pred.total()}


def _strict_split(tag: str, prefixes: str, scheme: str = "") -> tuple[str, str]:
    """(prefix, type) of a well-formed tag: O, or one of `prefixes`, a hyphen, a type."""
    if tag == "O":
        return "O", ""
    prefix, hyphen, chunk_type = tag.partition("-")
    if not hyphen or len(prefix) != 1 or prefix not in prefixes or not chunk_type:
        allowed = "/".join(f"{p}-" for p in prefixes)
        raise ValueError(f"bad {scheme + ' ' if scheme else ''}tag {tag!r}: expected O or {allowed} followed by a type")
    return prefix, chunk_type


def detect_scheme(sequences: list[list[str]]) -> str:
    """The tagging scheme of some sentences: "BIOES" if any tag is E-/S- (or BILOU's
    L-/U-); else "IOB1" if an I-X begins an entity (first in its sentence, after O, or
    after a tag of another type), which IOB2 never writes; else "IOB2". Ambiguous data
    (no such I-X, e.g. all entities one token long) reads as IOB2, which then means the
    same. ValueError for a tag that is not O or B-/I-/E-/S-/L-/U- and a type."""
    iob1 = False
    for tags in sequences:
        previous = _OUTSIDE
        for tag in tags:
            prefix, chunk_type = _strict_split(tag, _SCHEME_PREFIXES["BIOES"])
            if prefix in _CLOSING:
                return "BIOES"
            iob1 = iob1 or (prefix == "I" and previous[1] != chunk_type)
            previous = prefix, chunk_type
    return "IOB1" if iob1 else "IOB2"


def to_iob2(tags: list[str], scheme: str) -> list[str]:
    """One sentence's tags rewritten in IOB2: B-X on the first token of every entity,
    I-X on the others, O outside.

    IOB1 (and IOB2): an I-X that begins an entity (first in the sentence, after O, or
    after another type; conlleval reads it so) becomes B-X. BIOES/BILOU: S-/U-X -> B-X,
    E-/L-X -> I-X, and a tag right after an entity's last token (E-/S-/L-/U-) begins a
    new entity, so ill-formed input keeps the entity boundaries it spells. ValueError
    naming the tag for one the scheme does not write."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    prefixes, bioes = _SCHEME_PREFIXES[scheme], scheme == "BIOES"
    converted, previous = [], _OUTSIDE
    for tag in tags:
        prefix, chunk_type = _strict_split(tag, prefixes, scheme)
        if prefix == "O":
            converted.append("O")
        else:
            begins = (prefix in _OPENING or previous[1] != chunk_type
                      or (bioes and previous[0] in _CLOSING))
            converted.append(f"{'B' if begins else 'I'}-{chunk_type}")
        previous = prefix, chunk_type
    return converted
