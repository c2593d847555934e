"""An offline, rule-based sentence splitter for English-like, Korean, Chinese, Japanese
and Hindi text.

`split_sentences(paragraph)` cuts a paragraph after `.`, `!`, `?` or `…` (and any closing
quotes or brackets right after them) when whitespace follows and the next sentence
starts like a sentence: an uppercase letter, a digit, an opening quote/bracket, or a
letter of a script without case (Hangul, Han, kana, Devanagari, ...). It does not cut
after

- common abbreviations (`Mr.`, `Dr.`, `e.g.`, `etc.`, `St.`, month names, ...), and
  numbering abbreviations (`No.`, `p.`, `vol.`, `Fig.`) when a number follows,
- single initials (`J. R. R. Tolkien`) and dotted abbreviations (`U.S.`, `i.e.`),
- a dot inside a token (`3.5`, `os.path`, WikiText's ` @.@ ` / ` @,@ `), because no
  whitespace follows it,
- the dots of a date written `2018. 10. 14.` or `10. 14에` (Korean usage).

WikiText puts a space before the full stop (`lit . Valkyria`); the word before that space
is checked against the abbreviations too.

Where the next letter has no case, its case cannot tell a sentence start from a
continuation, so other rules decide (`_caseless_boundary`):

- `?` and `!` end a sentence; a single `.` does too, except after an abbreviation or
  initial as above, a one-letter word of a caseless script (Hindi `डॉ.`, `ई.`, Korean
  list letters `가.` `ㄱ.`), or a one- or two-digit number (list items `1. 첫째`, the day
  in `2018. 10. 14. 우울증`);
- an ellipsis (`..`, `...`, `…`) ends a sentence only after a Korean sentence-final
  syllable (`다`, `요`, `까`, `죠`, `네`, `오`, `음`, `함`): `했습니다... 그래서` is two
  sentences, `그런데.. 저는` one.

Korean often leaves out the space after a stop (`했습니다.그리고`): a stop between two
Hangul or Han/kana characters ends a sentence when it holds `?` or `!`, or follows a
Korean sentence-final syllable; `초.중.고` and `3.5` stay whole. Informal Korean also
leaves out the stop: the formal declarative ending `-니다` followed by a space and
Hangul (`했습니다 그리고`) ends a sentence too (25 of 25 sampled in the petitions were
boundaries).

CJK full stops (`。！？｡`) and the Devanagari danda (`।`, `॥`, with a verse number
`॥१॥`) end a sentence whatever follows, unless

- they sit inside brackets or quotes opened in the same sentence (`《摔跤吧！爸爸》`,
  `「今日は晴れ。明日は雨。」`), up to `_MAX_QUOTED` characters back, or
- a closing quote or bracket after them is followed by a Japanese particle (`と`,
  `って`, `を`, `が`, `は`, `の`, `に`, `へ`, `や`): `「行こう。」と彼は言った。` is one
  sentence.

No model, no download, no dependency: a regex finds candidates and a few set look-ups
veto them, so it runs at tens of MB/s (measured in tests/test_sentences.py).

It errs towards not splitting: a missed boundary costs the NSP task one boundary, a false
one feeds it a fragment.
"""
from __future__ import annotations

import re
from typing import Iterator

# Abbreviations after which a full stop does not end a sentence, whatever follows.
# Case-sensitive on purpose: "Dr." is a title, "dr." is rare; "Al." would be a name.
# The Devanagari ones are Hindi's Dr., Prof., Mr. and Mrs., and the Latin letters
# spelled with more than one letter, as in initials ("के. आर. नारायणन"; the one-letter
# ones, "के", are initials by _caseless_boundary's rule).
ABBREVIATIONS = frozenset(
    """
    Mr Mrs Ms Messrs Mme Mlle Dr Prof Sr Jr St Mt Ft Gen Col Lt Sgt Capt Cmdr Adm Maj
    Gov Sen Rep Rev Hon Pres Supt Insp Esq
    Inc Ltd Co Corp Bros Dept Univ Assn Ave Blvd Rd
    Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec
    e.g i.e etc cf viz vs al approx ca c esp incl resp lit ibid Ibid est dept
    E.g I.e Cf Vs Approx Ca
    डॉ प्रो श्री श्रीमती
    एफ एच आई एल एम एन आर एस क्यू डब्ल्यू एक्स वाई ज़ेड
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
# Korean syllables that end a sentence (declarative -다, polite -요, questions -까 and
# -죠, -네, imperative -오, and the memo style's nominal -음 / -함).
KOREAN_FINAL = frozenset("다요까죠네오음함")
# Letters Korean uses to number list items (가. 나. 다. ...); "다" alone is never a
# sentence, its sentence-final use is always the end of a longer word.
_KOREAN_LIST_LETTERS = frozenset("가나다라마바사아자차카타파하")

_CLOSERS = "\"'”’»)]}」』）】》〉〕］｝"
_OPENERS = "\"'“‘«([{¿¡「『（【《〈〔［｛"
_STOPS = ".!?…"
_CJK_STOPS = "。！？｡"
_INDIC_STOPS = "।॥"
# Brackets tracked after a CJK or Indic stop: a stop inside them does not end the sentence.
_CJK_PAIRS = {"「": "」", "『": "』", "《": "》", "〈": "〉", "（": "）", "【": "】", "〔": "〕", "“": "”"}
_CJK_CLOSING = {closer: opener for opener, closer in _CJK_PAIRS.items()}
_MAX_QUOTED = 300  # an opener further back than this is taken as never closed
# Japanese particles after a closing quote: the quote is part of the sentence
# (「…。」と言った, 『…。』を読む). Not も or で, which also start sentences (もし, でも).
_QUOTE_PARTICLES = ("と", "って", "を", "が", "は", "の", "に", "へ", "や")
_HANGUL = "\uac00-\ud7a3"
_HAN_KANA = "\u3040-\u30ff\u4e00-\u9fff"
# A candidate boundary, found in one C-level scan:
# - western: terminal punctuation, closers, whitespace, and a look at the next
#   character: ASCII uppercase, digit, opener, or any non-ASCII character (checked in
#   Python: "É" starts a sentence, "é" does not, "한" is decided by _caseless_boundary);
# - CJK and Indic: full stops (a danda with its verse number), closers and optional
#   whitespace, whatever follows;
# - attached: western stops between two Hangul or Han/kana characters, no space;
# - Korean's formal declarative ending -니다 and a space before Hangul, no stop at all.
_CANDIDATE = re.compile(
    rf"[{_STOPS}]+[{re.escape(_CLOSERS)}]*\s+(?=[A-Z0-9{re.escape(_OPENERS)}]|[^\x00-\x7f])"
    rf"|(?:[{_CJK_STOPS}]+|[{_INDIC_STOPS}]+(?:\s*[०-९0-9]+\s*[{_INDIC_STOPS}]+)?)[{re.escape(_CLOSERS)}]*\s*"
    rf"|(?<=[{_HANGUL}{_HAN_KANA}])[{_STOPS}]+(?=[{_HANGUL}{_HAN_KANA}])"
    rf"|(?<=니다)\s+(?=[{_HANGUL}])"
)
# Dotted abbreviations, seen without their last dot: "U.S", "e.g", "Ph.D", "a.m".
_DOTTED = re.compile(r"[A-Za-z]{1,3}(?:\.[A-Za-z]{1,3})+\Z")
_LIST_NUMBER = re.compile(r"(?<!\d)\d{1,2}\Z")  # "1" of "1. 첫째", "14" of "10. 14. 우울증"
# Dates: 2018. 10. 14. / 2019. 4. / a month and day before a Korean particle, 10. 14에
_DATE = re.compile(rf"(?<!\d)\d{{4}}\. ?\d{{1,2}}\.(?: ?\d{{1,2}}\.?)?(?!\d)|(?<!\d)\d{{1,2}}\. ?\d{{1,2}}(?=[{_HANGUL}])")
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


def _is_caseless_letter(char: str) -> bool:
    return char.isalpha() and not (char.isupper() or char.islower() or char.istitle())


def _in_date(text: str, dot: int) -> bool:
    """Whether text[dot] is a dot inside a date "2018. 10. 14." (not its last character)."""
    return any(match.start() < dot < match.end() - 1 for match in _DATE.finditer(text, max(0, dot - 12), dot + 12))


def _caseless_boundary(text: str, stop: int, word: str) -> bool:
    """Whether the stops at text[stop] end a sentence when the next sentence would start
    with a letter of a caseless script (rules in the module docstring)."""
    run_end = stop
    while run_end < len(text) and text[run_end] in _STOPS:
        run_end += 1
    run = text[stop:run_end]
    if "?" in run or "!" in run:
        return True
    if run != ".":  # an ellipsis
        return text[stop - 1] in KOREAN_FINAL if stop else False
    if _is_abbreviation(word, "") or _LIST_NUMBER.search(word):
        return False
    letters = [c for c in word if c.isalpha()]
    if len(letters) == 1 and letters[0] == word[0]:  # one letter, maybe with its vowel signs
        if "\uac00" <= word[0] <= "\ud7a3":
            return word not in _KOREAN_LIST_LETTERS
        return False
    return True


def _attached_boundary(text: str, stop: int, end: int) -> bool:
    """Stops with no space between two Hangul or Han/kana characters ("했습니다.그리고")."""
    run = text[stop:end]
    return "?" in run or "!" in run or text[stop - 1] in KOREAN_FINAL


def _inside_brackets(text: str, start: int, end: int) -> bool:
    """Whether a CJK bracket or quote opened in text[start:end] is still open at end
    (one opened more than _MAX_QUOTED characters back counts as never closed)."""
    # Openers before `low` do not count, and a closer pairs with the latest opener of its
    # kind, so the scan can start at `low`: it costs _MAX_QUOTED characters at most.
    low = max(start, end - _MAX_QUOTED)
    open_at: list[tuple[str, int]] = []
    for position in range(low, end):
        char = text[position]
        if char in _CJK_PAIRS:
            open_at.append((char, position))
        elif char in _CJK_CLOSING:
            opener = _CJK_CLOSING[char]
            for i in range(len(open_at) - 1, -1, -1):
                if open_at[i][0] == opener:
                    del open_at[i:]
                    break
    return bool(open_at)


def _cjk_boundary(text: str, start: int, match: re.Match) -> bool:
    """A CJK or Indic full stop (with its closers) ends the sentence begun at start."""
    end = match.end()
    if end > match.start() + 1 and text[end - 1] in _CLOSERS and text.startswith(_QUOTE_PARTICLES, end):
        return False
    return not _inside_brackets(text, start, end)


def iter_sentence_spans(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each sentence in text, including surrounding whitespace."""
    start = 0
    length = len(text)
    for match in _CANDIDATE.finditer(text):
        end = match.end()
        if end >= length:
            break
        stop = match.start()
        if text[stop].isspace():  # "...했습니다 그리고": the ending is the stop
            pass
        elif text[stop] in _CJK_STOPS or text[stop] in _INDIC_STOPS:
            if not _cjk_boundary(text, start, match):
                continue
        elif not text[end - 1].isspace():
            if not _attached_boundary(text, stop, end):
                continue
        else:
            next_char = text[end]
            if next_char > "\x7f" and _is_caseless_letter(next_char):
                if not _caseless_boundary(text, stop, _word_before(text, stop)):
                    continue
            elif next_char > "\x7f" and not (
                next_char.isupper() or next_char.istitle() or next_char.isdigit() or next_char in _OPENERS
            ):
                continue
            elif text[stop] == "." and text[stop + 1] not in _STOPS:
                if _is_abbreviation(_word_before(text, stop), next_char):
                    continue
                if next_char.isdigit() and _in_date(text, stop):
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
