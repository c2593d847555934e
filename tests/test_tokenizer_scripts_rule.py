"""The auto accent-stripping rule and script detection (bertprep.tokenizer.scripts),
pinned against the rule's definition computed here from Unicode itself, never from the
module's helpers:

- a character's script is its Unicode Script property (the `regex` module, which
  transformers already needs), except where the module's name-based rule deliberately
  differs (listed in `_expected_script`);
- stripping a character is BERT-uncased's definition: NFD, then every Mn deleted;
- auto strips only when lower-casing a sample whose letters and marks are at least 99%
  Latin, Greek or Cyrillic, and stripping alters at most 5% of the characters of every
  script holding at least 0.1% of them (docs/inputs.md); warnings name the scripts
  where the chosen options alter more than 1%.

Samples sit exactly at and one character either side of each threshold, built by
counting the letters of real text.
"""
from __future__ import annotations

import collections
import gzip
import itertools
import json
import pathlib
import unicodedata

import pytest

from bertprep.tokenizer import choose_normalisation, script_of
from shared_data import SHARED_DATA

regex = pytest.importorskip("regex")

HINDI = pathlib.Path(__file__).parent / "data" / "hindi-gnome-messages.txt.gz"
PETITIONS = SHARED_DATA / "korean" / "petitions" / "petitions_2017-08"
WIKI_00 = SHARED_DATA / "enwiki_wikiextractor" / "wiki_00"
GOOGLE_SAMPLE = SHARED_DATA / "google_sample_text.txt"

# Article 1 of the Universal Declaration of Human Rights in each language.
UDHR = {
    "en": "All human beings are born free and equal in dignity and rights. They are endowed with reason and "
          "conscience and should act towards one another in a spirit of brotherhood.",
    "fr": "Tous les êtres humains naissent libres et égaux en dignité et en droits. Ils sont doués de raison et de "
          "conscience et doivent agir les uns envers les autres dans un esprit de fraternité.",
    "de": "Alle Menschen sind frei und gleich an Würde und Rechten geboren. Sie sind mit Vernunft und Gewissen "
          "begabt und sollen einander im Geist der Brüderlichkeit begegnen.",
    "es": "Todos los seres humanos nacen libres e iguales en dignidad y derechos y, dotados como están de razón y "
          "conciencia, deben comportarse fraternalmente los unos con los otros.",
    "ru": "Все люди рождаются свободными и равными в своем достоинстве и правах. Они наделены разумом и совестью "
          "и должны поступать в отношении друг друга в духе братства.",
    "el": "Όλοι οι άνθρωποι γεννιούνται ελεύθεροι και ίσοι στην αξιοπρέπεια και τα δικαιώματα. Είναι "
          "προικισμένοι με λογική και συνείδηση, και οφείλουν να συμπεριφέρονται μεταξύ τους με πνεύμα "
          "αδελφοσύνης.",
    "vi": "Tất cả mọi người sinh ra đều được tự do và bình đẳng về nhân phẩm và quyền lợi. Mọi con người đều "
          "được tạo hóa ban cho lý trí và lương tâm và cần phải đối xử với nhau trong tình anh em.",
    "th": "มนุษย์ทั้งหลายเกิดมามีอิสระและเสมอภาคกันในเกียรติศักดิ์และสิทธิ ต่างมีเหตุผลและมโนธรรม "
          "และควรปฏิบัติต่อกันด้วยเจตนารมณ์แห่งภราดรภาพ",
    "ar": "يولد جميع الناس أحرارًا متساوين في الكرامة والحقوق. وقد وهبوا عقلاً وضميرًا وعليهم أن يعامل بعضهم "
          "بعضًا بروح الإخاء.",
    "ja": "すべての人間は、生まれながらにして自由であり、かつ、尊厳と権利とについて平等である。人間は、理性と"
          "良心とを授けられており、互いに同胞の精神をもって行動しなければならない。",
    "zh": "人人生而自由，在尊严和权利上一律平等。他们赋有理性和良心，并应以兄弟关系的精神相对待。",
}
# Greek written in capitals, as signs and headlines are: capitals carry no tonos.
GREEK_CAPITALS = "ΟΛΟΙ ΟΙ ΑΝΘΡΩΠΟΙ ΓΕΝΝΙΟΥΝΤΑΙ ΕΛΕΥΘΕΡΟΙ ΚΑΙ ΙΣΟΙ ΣΤΗΝ ΑΞΙΟΠΡΕΠΕΙΑ ΚΑΙ ΤΑ ΔΙΚΑΙΩΜΑΤΑ"

# Unicode's script names as the module spells them.
_UNICODE_SCRIPTS = ("Latin", "Greek", "Cyrillic", "Armenian", "Hebrew", "Arabic", "Devanagari", "Bengali", "Thai",
                    "Georgian", "Hangul", "Hiragana", "Katakana", "Han", "Tifinagh", "Linear_B", "Inherited",
                    "Common")
_MODULE_NAME = {"Han": "CJK", "Linear_B": "Linear"}
LGC = ("Latin", "Greek", "Cyrillic")


def _unicode_script(ch: str) -> str | None:
    return next((name for name in _UNICODE_SCRIPTS if regex.match(rf"\p{{Script={name}}}", ch)), None)


def _expected_script(ch: str) -> str | None:
    """The script the rule gives ch, from Unicode's Script property. The module names
    scripts by the first word of the character's name, which differs from the property
    for: modifier letters (ᵃ, ᴵ: "Modifier"), and marks of the Inherited script named
    after one script (ARABIC FATHATAN: that script; COMBINING ...: "Inherited")."""
    if unicodedata.category(ch)[0] not in "LM":
        return None
    script = _unicode_script(ch)
    name = unicodedata.name(ch)
    if name.startswith("MODIFIER LETTER"):
        return "Modifier"
    if script == "Inherited" and not name.startswith(("COMBINING", "VARIATION")):
        script = next(s for s in _UNICODE_SCRIPTS if regex.match(rf"\p{{Script_Extensions={s}}}", ch))
    return _MODULE_NAME.get(script, script)


def _stripped(ch: str) -> str:
    """BERT-uncased's accent stripping of a lower-cased character: NFD, every Mn deleted."""
    return "".join(c for c in unicodedata.normalize("NFD", ch.lower()) if unicodedata.category(c) != "Mn")


def _per_script(counts: dict[str, int]) -> dict[str, tuple[int, int]]:
    """script -> (letters and marks, how many of them stripping alters), by the definitions above."""
    out: dict[str, list[int]] = {}
    for ch, n in counts.items():
        script = _expected_script(ch)
        if script is None:
            continue
        entry = out.setdefault(script, [0, 0])
        entry[0] += n
        entry[1] += n if _stripped(ch) != ch.lower() else 0
    return {script: (chars, altered) for script, (chars, altered) in out.items()}


def _expected_auto(counts: dict[str, int]) -> bool:
    """The auto rule in integer arithmetic (lower-casing assumed)."""
    per = _per_script(counts)
    letters = sum(chars for chars, _ in per.values())
    lgc = sum(chars for script, (chars, _) in per.items() if script in LGC)
    if lgc * 100 < 99 * letters:
        return False
    return all(altered * 20 <= chars for chars, altered in per.values() if chars * 1000 >= letters)


def _letters(text: str, n: int) -> collections.Counter:
    """Counts of the first n letters and marks of text, read round and round."""
    letters = [c for c in text if unicodedata.category(c)[0] in "LM"]
    return collections.Counter(itertools.islice(itertools.cycle(letters), n))


def _real(path: pathlib.Path) -> str:
    if not path.is_file():
        pytest.skip(f"shared data not found at {path}")
    return path.read_text(encoding="utf-8")


def _petitions(records: int = 60) -> str:
    lines = _real(PETITIONS).split("\n")[:records]
    return " ".join(json.loads(line)["content"] for line in lines)


def _hindi() -> str:
    return gzip.open(HINDI, "rt", encoding="utf-8").read()


# -- script detection ------------------------------------------------------------------

@pytest.mark.parametrize("word, script", [
    ("청원합니다", "Hangul"), ("ㅋㅋㅠㅠ", "Hangul"), ("\u1100\u1161", "Hangul"),  # syllables, compatibility and conjoining jamo
    ("मनुष्यों", "Devanagari"),  # with virama and vowel signs (Mn, Mc)
    ("ทั้งหลาย", "Thai"),  # with a tone mark (Mn)
    ("أحرارًا", "Arabic"),  # with hamza and tanwin
    ("平等", "CJK"), ("豈", "CJK"), ("𠀀", "CJK"),  # unified, compatibility, extension B
    ("すべて", "Hiragana"), ("カタカナ", "Katakana"), ("ｶﾀｶﾅ", "Katakana"), ("ー", "Katakana"),
    ("Tất", "Latin"), ("đẳng", "Latin"), ("ＡＢＣ", "Latin"), ("ⁱ", "Latin"), ("ªº", "Latin"),
    ("\u212a\u212b", "Latin"),  # KELVIN SIGN, ANGSTROM SIGN
    ("Όλοι", "Greek"), ("\u00b5\u2126", "Greek"),  # MICRO SIGN, OHM SIGN
    ("Всё", "Cyrillic"), ("עברית", "Hebrew"), ("ქართული", "Georgian"),
    ("\u0301\u0308\ufe0f", "Inherited"),  # combining acute and diaeresis, a variation selector
])
def test_every_named_script_is_told_letter_by_letter(word, script):
    assert [script_of(c) for c in word] == [script] * len(word)


def test_digits_punctuation_symbols_and_emoji_belong_to_no_script():
    assert {script_of(c) for c in "0123456789٣७๓３.,;:!?。！？、«»()「」 \t\n$€₩%&*+=😀❤👍\u200d·—"} == {None}


def test_scripts_of_real_text_follow_unicode():
    """Every letter and mark of the real samples gets the script Unicode gives it (Common
    letters, such as the length mark ː, are left to the table above)."""
    wikitext_title = "戦場のヴァルキュリア3"  # WikiText-2's first line: kanji, hiragana, katakana
    texts = [_petitions(), _hindi(), _real(WIKI_00), _real(GOOGLE_SAMPLE), wikitext_title, *UDHR.values()]
    seen = collections.Counter()
    for ch in set("".join(texts)):
        if _unicode_script(ch) == "Common" and unicodedata.category(ch)[0] in "LM":
            continue
        assert script_of(ch) == _expected_script(ch), (ch, f"U+{ord(ch):04X}")
        seen[script_of(ch)] += 1
    assert {"Hangul", "Devanagari", "Latin", "Greek", "Cyrillic", "Thai", "Arabic", "CJK", "Hiragana", "Katakana",
            "Bengali", "Hebrew"} <= set(seen)


# -- the auto decision on real languages ------------------------------------------------

# By hand, from docs/inputs.md: English, German, Spanish, French, Russian are stripped as
# BERT-uncased; Korean, Hindi, Thai, Arabic, Chinese, Japanese, Vietnamese and modern
# Greek are not.
@pytest.mark.parametrize("language, strips", [
    ("en", True), ("fr", True), ("de", True), ("es", True), ("ru", True),
    ("el", False), ("vi", False), ("th", False), ("ar", False), ("ja", False), ("zh", False),
    ("ko", False), ("hi", False),
])
def test_auto_decides_each_language_as_documented(language, strips):
    text = {"ko": _petitions, "hi": _hindi}.get(language, lambda: UDHR[language])()
    counts = collections.Counter(text)
    assert _expected_auto(counts) is strips  # the rule, computed here, agrees with the docs
    norm = choose_normalisation(counts, lowercase=True, strip_accents=None)
    assert (norm.strip_accents, norm.chosen_by) == (strips, "auto")
    per = _per_script(counts)
    letters = sum(chars for chars, _ in per.values())
    lgc = sum(chars for script, (chars, _) in per.items() if script in LGC) / letters
    assert norm.scripts == pytest.approx({s: chars / letters for s, (chars, _) in per.items()}, rel=1e-12)
    if lgc < 0.99 or strips:
        assert norm.reason == f"{lgc:.1%} of the letters are Latin, Greek or Cyrillic"
    else:
        worst, (chars, altered) = max(per.items(), key=lambda item: item[1][1] / item[1][0])
        assert norm.reason == f"stripping would alter {altered / chars:.1%} of the {worst} characters"
    assert choose_normalisation(counts, lowercase=False, strip_accents=None).strip_accents is False


def test_wikipedia_with_greek_quotations_keeps_accents():
    """wiki_00 quotes Greek (Aristotle, Alphabet): 0.14% of its letters, a fifth of them
    accented, so by the rule the file is not stripped (wiki_01, with less Greek, is)."""
    counts = collections.Counter(_real(WIKI_00))
    per = _per_script(counts)
    letters = sum(chars for chars, _ in per.values())
    greek, accented = per["Greek"]
    assert greek * 1000 >= letters and accented * 20 > greek  # judged, and over 5%
    norm = choose_normalisation(counts, lowercase=True, strip_accents=None)
    assert norm.strip_accents is False
    assert norm.reason == f"stripping would alter {accented / greek:.1%} of the Greek characters"


# -- the thresholds, one character either side ------------------------------------------

def test_99_percent_latin_greek_cyrillic_is_the_edge():
    """English and Chinese letters 99:1 strip; one Chinese letter more does not."""
    english = _letters(UDHR["en"], 990)
    for han, strips in ((9, True), (10, True), (11, False)):
        counts = english + _letters(UDHR["zh"], han)
        assert _expected_auto(counts) is strips
        norm = choose_normalisation(counts, lowercase=True, strip_accents=None)
        assert norm.strip_accents is strips, han
        assert norm.reason == f"{990 / (990 + han):.1%} of the letters are Latin, Greek or Cyrillic"


def test_99_percent_is_counted_not_summed_from_rounded_shares():
    """Exactly 99% of the letters Latin, Greek or Cyrillic (83 Greek : 8 Cyrillic : 8
    Latin : 1 Han) strips: 0.83 + 0.08 + 0.08 in floating point is just under 0.99."""
    counts = _letters(GREEK_CAPITALS, 830) + _letters(UDHR["ru"], 80) + _letters(UDHR["en"], 80) + _letters(UDHR["zh"], 10)
    assert _per_script(counts) == {"Greek": (830, 0), "Cyrillic": (80, 0), "Latin": (80, 0), "CJK": (10, 0)}
    assert _expected_auto(counts) is True
    norm = choose_normalisation(counts, lowercase=True, strip_accents=None)
    assert norm.strip_accents is True and norm.reason == "99.0% of the letters are Latin, Greek or Cyrillic"


def test_5_percent_altered_is_the_edge():
    """Latin letters of which exactly 5% are accented (French é, ê, è) strip; one more
    accented letter does not, and the reason gives the share."""
    accented = "".join(c for c in UDHR["fr"] if _stripped(c) != c.lower())
    for altered, strips in ((49, True), (50, True), (51, False)):
        counts = _letters(UDHR["en"], 1000 - altered) + _letters(accented, altered)
        assert _per_script(counts) == {"Latin": (1000, altered)}
        assert _expected_auto(counts) is strips
        norm = choose_normalisation(counts, lowercase=True, strip_accents=None)
        assert norm.strip_accents is strips, altered
        if not strips:
            assert norm.reason == "stripping would alter 5.1% of the Latin characters"


def test_each_script_is_judged_on_its_own_share_from_0_1_percent():
    """Accented Greek (a tenth of its letters) beside plain English: 0.1% of the letters
    is judged and stops stripping, though only 0.01% of all letters would change; one
    English letter more puts Greek under 0.1% and the sample strips."""
    greek = _letters(UDHR["el"], 155)
    greek_chars, greek_altered = _per_script(greek)["Greek"]
    assert greek_altered * 20 > greek_chars  # over 5% of Greek, under 5% of the sample
    for english, strips in ((999 * 155, False), (999 * 155 + 1, True)):
        counts = _letters(UDHR["en"], english) + greek
        assert _expected_auto(counts) is strips
        norm = choose_normalisation(counts, lowercase=True, strip_accents=None)
        assert norm.strip_accents is strips, english
        if strips:
            assert set(norm.altered) == {"Latin"} and norm.warnings == []  # Greek is not judged, so not warned about
        else:
            assert norm.reason == f"stripping would alter {greek_altered / greek_chars:.1%} of the Greek characters"


# -- the warnings -----------------------------------------------------------------------

def test_warning_from_just_over_1_percent_with_its_share_and_example():
    """--strip-accents on Latin with 1% accented letters: no warning; 1.1%: one line giving
    the share and the most frequent altered letter with its code points."""
    plain = _letters(UDHR["en"], 990)
    assert choose_normalisation(plain + collections.Counter({"é": 10}), True, True).warnings == []
    assert choose_normalisation(plain + collections.Counter({"é": 11}), True, True).warnings != []  # 11 of 1,001
    # 12 of 1,002, three letters tied as the most frequent: the example is the lowest code point.
    counts = plain + collections.Counter({"ü": 4, "à": 4, "é": 4})
    [warning] = choose_normalisation(counts, True, True).warnings
    assert warning == ("accent stripping (--strip-accents) changes letters beyond case: it alters 1.2% of the Latin "
                       "characters of the training sample (e.g. 'à' (U+00E0) -> 'a' (U+0061)); "
                       "--no-strip-accents keeps them")
    # auto strips it too (1.2% <= 5%), and says so in the same words.
    [auto] = choose_normalisation(counts, True, None).warnings
    assert auto.startswith("accent stripping (auto) changes letters beyond case: it alters 1.2% of the Latin ")


def test_forced_stripping_of_many_scripts_lists_three_then_counts_the_rest():
    """Korean, Hindi, Thai, Arabic and Japanese in one sample: the three largest scripts
    altered beyond 1% are named with their shares, the others counted, and the example
    is the worst script's most frequent altered character."""
    text = _petitions(20) + _hindi()[:20_000] + UDHR["th"] * 30 + UDHR["ar"] * 30 + UDHR["ja"] * 30
    counts = collections.Counter(text)
    per = _per_script(counts)
    letters = sum(chars for chars, _ in per.values())
    order = sorted(per, key=lambda s: (-per[s][0], s))
    hit = [s for s in order if per[s][0] * 1000 >= letters and per[s][1] * 100 > per[s][0]]
    assert len(hit) > 3 and hit[0] == "Hangul"
    shares = ", ".join(f"{per[s][1] / per[s][0]:.1%} of the {s} characters" for s in hit[:3])
    worst = max(hit, key=lambda s: (per[s][1] / per[s][0], s))
    example = min((ch for ch in counts if _expected_script(ch) == worst and _stripped(ch) != ch.lower()),
                  key=lambda ch: (-counts[ch], ord(ch)))
    out = _stripped(example)
    norm = choose_normalisation(counts, True, True)
    assert norm.warnings == [
        f"accent stripping (--strip-accents) changes letters beyond case: it alters {shares} and {len(hit) - 3} more "
        f"scripts of the training sample (e.g. {example!r} (U+{ord(example):04X}) -> {out!r} "
        f"({' '.join(f'U+{ord(c):04X}' for c in out)})); --no-strip-accents keeps them"]
    # The script mix: the five largest, then the rest as "other".
    top = order[:5]
    rest = 1 - sum(per[s][0] for s in top) / letters
    assert norm.describe_scripts() == ", ".join(f"{s} {per[s][0] / letters:.1%}" for s in top) + f", other {rest:.1%}"
    assert choose_normalisation(counts, True, None).warnings == []  # auto keeps them all
