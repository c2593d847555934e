"""Hard-wrapped prose (books, articles): wrapped lines joined back into paragraphs.

The layout of `--sentences prose`: a blank line ends a paragraph (not a document); the
lines of a paragraph are joined with one space; `bertprep.corpus.spec` then splits each
paragraph into sentences and makes a document of each file (or section, with
`--document-separator`). `ProseParagraphs` buffers the lines of one document, so memory
is bounded by the document limit of the corpus reader.

A word split across a line break ("docu-" / "ment") is joined only when that is clearly
one word; a compound broken at its own hyphen ("well-" / "known") keeps the hyphen and
loses only the line break (BERT's pre-tokenizer splits at every hyphen, so "well-known"
and "well- known" give the same tokens; the hyphen removal is what changes them). A line ending in a letter and one hyphen, followed by a line
that starts with a lower-case letter, is a candidate; with `left` the letters before the
hyphen and `right` the letters that start the next line, the hyphen is removed when

1. the hyphenated form `left-right` does not occur (inside a line) in the same
   document, since a document's own spelling wins, and
2. any of:
   - `known_word(left + right)`: the tokenizer's vocabulary holds the joined word as a
     whole-word token (build-shards passes this; see `vocabulary_lookup`);
   - the joined word occurs elsewhere in the same document (any case);
   - `right` is a suffix that is no word by itself (`SUFFIXES`: "ment", "tion", "ing").

train-tokenizer has no vocabulary yet, so there only the last two apply: a rare word
split at a line end and found nowhere else in its document keeps its hyphen there,
where build-shards may join it. Everything else a line holds is kept: joining removes
only the line-break whitespace and the hyphens named above (tests/test_prose.py checks
this as a property).
"""
from __future__ import annotations

import re
from typing import Callable

# Endings that are never English words on their own, so "X-" + one of these across a
# line break is a word hyphenated by the typesetter, not a compound.
SUFFIXES = frozenset(
    """
    tion tions sion sions ment ments ness nesses ity ities ing ings ed ly ally ous ious
    eous ible ance ances ence ences ism isms ist ists ize ized izes izing ise ised ising
    ful fully ship ships hood hoods ular ive ives ative ically ical ology ologies
    """.split()
)
_LETTERS = r"[^\W\d_]"  # a letter, in any script
_TRAILING_FRAGMENT = re.compile(rf"{_LETTERS}+-\Z")
_LEADING_FRAGMENT = re.compile(rf"{_LETTERS}+")
_WORD = re.compile(rf"{_LETTERS}+(?:-{_LETTERS}+)*")
_TAIL = 64  # characters of a line end searched for the fragment (a word is shorter)

KnownWord = Callable[[str], bool]


def _fragment_before_hyphen(line: str) -> str | None:
    """The letters before a final single hyphen ("docu" of "the docu-"), else None."""
    if len(line) < 2 or line[-1] != "-" or not line[-2].isalpha():
        return None
    match = _TRAILING_FRAGMENT.search(line[-_TAIL:])
    return match.group(0)[:-1] if match else None


def _fragment_after_break(line: str) -> str | None:
    """The letters that start a line, when it starts with a lower-case letter."""
    if not line[:1].islower():
        return None
    match = _LEADING_FRAGMENT.match(line, 0, _TAIL)
    return match.group(0) if match else None


def document_words(paragraphs: list[list[str]]) -> set[str]:
    """Lower-cased words and hyphenated compounds written inside the lines."""
    text = "\n".join(line for lines in paragraphs for line in lines).lower()  # no word spans a "\n"
    words = set(_WORD.findall(text))
    for compound in [word for word in words if "-" in word]:
        words.update(compound.split("-"))
    return words


def join_is_one_word(left: str, right: str, words: set[str], known_word: KnownWord | None) -> bool:
    """Whether "left-" + line break + "right" is one word (rules in the module docstring)."""
    joined = left + right
    if f"{left}-{right}".lower() in words:
        return False
    if known_word is not None and known_word(joined):
        return True
    return joined.lower() in words or right.lower() in SUFFIXES


def join_paragraph(lines: list[str], is_one_word: Callable[[str, str], bool]) -> tuple[str, int]:
    """(the paragraph's stripped lines joined, hyphens removed). Lines are joined with one
    space, except after a letter and a hyphen: there the hyphen is dropped when the next
    line starts a lower-case fragment and is_one_word(left, right) says so, else it stays
    and the lines join with no space ("well-known", "Anglo-Saxon")."""
    pieces = [lines[0]]
    removed = 0
    for previous, line in zip(lines, lines[1:]):
        left = _fragment_before_hyphen(previous)
        if left is None:
            pieces.append(" ")
        else:
            right = _fragment_after_break(line)
            if right is not None and is_one_word(left, right):
                pieces[-1] = pieces[-1][:-1]
                removed += 1
        pieces.append(line)
    return "".join(pieces), removed


class ProseParagraphs:
    """The wrapped lines of one document, grouped into paragraphs until `take()`."""

    def __init__(self, known_word: KnownWord | None = None):
        self.known_word = known_word
        self.paragraphs: list[list[str]] = []
        self.chars = 0  # characters buffered
        self.hyphens_removed = 0  # over the whole life of this object
        self._open = False  # the last paragraph still takes lines
        self._candidates = False  # some buffered line ends in a hyphen

    def add_line(self, line: str) -> None:
        """Add one stripped, non-empty line to the current paragraph."""
        if self._open:
            self.paragraphs[-1].append(line)
        else:
            self.paragraphs.append([line])
            self._open = True
        self.chars += len(line) + 1
        self._candidates = self._candidates or line.endswith("-")

    def end_paragraph(self) -> None:
        """A blank line: the next line starts a new paragraph."""
        self._open = False

    def take(self) -> list[str]:
        """The buffered paragraphs, joined and de-hyphenated; the buffer is emptied."""
        if not self.paragraphs:
            return []
        words = document_words(self.paragraphs) if self._candidates else set()

        def is_one_word(left: str, right: str) -> bool:
            return join_is_one_word(left, right, words, self.known_word)

        joined = []
        for lines in self.paragraphs:
            text, removed = join_paragraph(lines, is_one_word)
            joined.append(text)
            self.hyphens_removed += removed
        self.paragraphs, self.chars, self._open, self._candidates = [], 0, False, False
        return joined


def vocabulary_lookup(tok) -> KnownWord:
    """known_word for a LoadedTokenizer: the word, normalized as the tokenizer normalizes
    text (lower-casing and accent stripping when uncased), is a whole-word token. For
    other kinds than WordPiece (no "##" pieces to tell a whole word by): the word, after
    a space as inside running text, is one token of the tokenizer."""
    if tok.kind != "wordpiece":
        text = tok.text_tokenizer()
        return lambda word: len(text.encode(" " + word, add_special_tokens=False).ids) == 1
    whole_words = {t for t in tok.vocab if not t.startswith("##") and not (t.startswith("[") and t.endswith("]"))}
    normalizer = tok.tokenizer.normalizer

    def known_word(word: str) -> bool:
        return (normalizer.normalize_str(word) if normalizer is not None else word) in whole_words

    return known_word
