"""An offline, rule-based sentence splitter for English-like text.

`split_sentences(paragraph)` cuts a paragraph after `.`, `!`, `?` or `…` (and any closing
quotes or brackets right after them) when whitespace follows and the next sentence
starts like a sentence: an uppercase letter, a digit, or an opening quote/bracket. It
does not cut after

- common abbreviations (`Mr.`, `Dr.`, `e.g.`, `etc.`, `St.`, month names, ...), and
  numbering abbreviations (`No.`, `p.`, `vol.`, `Fig.`) when a number follows,
- single initials (`J. R. R. Tolkien`) and dotted abbreviations (`U.S.`, `i.e.`),
- a dot inside a token (`3.5`, `os.path`, WikiText's ` @.@ ` / ` @,@ `), because no
  whitespace follows it.

WikiText puts a space before the full stop (`lit . Valkyria`); the word before that space
is checked against the abbreviations too. CJK full stops (。！？) end a sentence whatever
follows. No model, no download, no dependency: a regex finds candidates and a few set
look-ups veto them, so it runs at tens of MB/s (measured in tests/test_sentences.py).

It errs towards not splitting: a missed boundary costs the NSP task one boundary, a false
one feeds it a fragment.
"""
from __future__ import annotations

import re
from typing import Iterator

# Abbreviations after which a full stop does not end a sentence, whatever follows.
# Case-sensitive on purpose: "Dr." is a title, "dr." is rare; "Al." would be a name.
ABBREVIATIONS = frozenset(
    """
    Mr Mrs Ms Messrs Mme Mlle Dr Prof Sr Jr St Mt Ft Gen Col Lt Sgt Capt Cmdr Adm Maj
    Gov Sen Rep Rev Hon Pres Supt Insp Esq
    Inc Ltd Co Corp Bros Dept Univ Assn Ave Blvd Rd
    Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec
    e.g i.e etc cf viz vs al approx ca c esp incl resp lit ibid Ibid est dept
    E.g I.e Cf Vs Approx Ca
    """.split()
)
# Abbreviations that only bind to a following number: "No. 5", "p. 12", "Fig. 3"; before
# a word ("He said no. Then ...") they are ordinary words.
NUMBER_ABBREVIATIONS = frozenset(
    """
    No no Nos nos Nr nr p pp P Pp vol Vol vols Vols fig Fig figs Figs ch Ch chap Chap
    sec Sec art Art op Op para Para eq Eq Eqs eqs
    """.split()
)

_CLOSERS = "\"'”’»)]}」』）】"
_OPENERS = "\"'“‘«([{¿¡「『（【"
_STOPS = ".!?…"
_CJK_STOPS = "。！？"
# A candidate boundary, found in one C-level scan:
# - western: terminal punctuation, closers, whitespace, and a look at the next
#   character: ASCII uppercase, digit, opener, or any non-ASCII character (checked in
#   Python: "É" starts a sentence, "é" does not);
# - CJK: full stops, closers and optional whitespace, whatever follows.
_CANDIDATE = re.compile(
    rf"[{_STOPS}]+[{re.escape(_CLOSERS)}]*\s+(?=[A-Z0-9{re.escape(_OPENERS)}]|[^\x00-\x7f])"
    rf"|[{_CJK_STOPS}]+[{re.escape(_CLOSERS)}]*\s*"
)
# Dotted abbreviations, seen without their last dot: "U.S", "e.g", "Ph.D", "a.m".
_DOTTED = re.compile(r"[A-Za-z]{1,3}(?:\.[A-Za-z]{1,3})+\Z")
_LOOKBEHIND = 40  # characters searched back for the word before a full stop


def _word_before(text: str, dot: int) -> str:
    """The word before text[dot]; one space may come between, as in WikiText's "lit ."."""
    end = dot - 1 if dot and text[dot - 1] == " " else dot
    low = max(0, end - _LOOKBEHIND)
    space = text.rfind(" ", low, end)
    return text[space + 1 if space >= 0 else low:end].lstrip(_OPENERS)


def _is_abbreviation(word: str, next_char: str) -> bool:
    """Whether a single full stop after word ends an abbreviation, not a sentence."""
    if word in ABBREVIATIONS or _DOTTED.match(word):
        return True
    if len(word) == 1 and word.isupper():  # an initial: "J. R. R. Tolkien"
        return True
    return word in NUMBER_ABBREVIATIONS and next_char.isdigit()


def iter_sentence_spans(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each sentence in text, including surrounding whitespace."""
    start = 0
    length = len(text)
    for match in _CANDIDATE.finditer(text):
        end = match.end()
        if end >= length:
            break
        stop = match.start()
        if text[stop] not in _CJK_STOPS:
            next_char = text[end]
            if next_char > "\x7f" and not (
                next_char.isupper() or next_char.istitle() or next_char.isdigit() or next_char in _OPENERS
            ):
                continue
            if text[stop] == "." and text[stop + 1] not in _STOPS:
                if _is_abbreviation(_word_before(text, stop), next_char):
                    continue
        yield start, end
        start = end
    if start < length:
        yield start, length


def split_sentences(text: str) -> list[str]:
    """The sentences of one paragraph, stripped, empty ones dropped.

    >>> split_sentences("Dr. Watson arrived at 3.5 p.m. on Monday. He was late!")
    ['Dr. Watson arrived at 3.5 p.m. on Monday.', 'He was late!']
    """
    sentences = []
    for start, end in iter_sentence_spans(text):
        sentence = text[start:end].strip()
        if sentence:
            sentences.append(sentence)
    return sentences
