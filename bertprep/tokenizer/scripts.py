"""Which normalisation a corpus gets: its script mix, and what accent stripping would do to it.

BERT-uncased's "lower-case" is two steps: lower-casing and accent stripping (NFD, then
every Mn character deleted). Stripping is harmless on English but not elsewhere:
- NFD turns every Hangul syllable into conjoining jamo (U+1100-U+11FF, category Lo, so
  they stay), and the vocabulary is then learnt over jamo: every token and decoded
  string is jamo, not the user's syllables;
- the deleted Mn characters are letters in other scripts: Devanagari virama and nasal
  signs, Thai vowel and tone marks, Arabic harakat and hamza (أ -> ا), Japanese dakuten
  (が -> か), Vietnamese tones.
So the two are separate options here, and `choose_normalisation` decides accent stripping
("auto") from the training sample: strip only when lower-casing a sample whose letters are
(almost) all Latin, Greek or Cyrillic and where stripping alters few characters of any
script (English, German, Spanish, French, Russian; not Vietnamese). Whatever was chosen,
a script whose characters the options alter beyond case gets a one-line warning.

The normaliser itself stays tokenizers' BertNormalizer (no NFC after it): transformers'
BertTokenizer rebuilds exactly that class from tokenizer_config.json (`do_lower_case`,
`strip_accents`), so a tokenizer.json with an extra NFC step would encode differently in
`AutoTokenizer.from_pretrained(TOKDIR)` than in `tokenizers` (measured with transformers
5.25). Under the default no script whose letters NFD splits is stripped, so nothing
needs recomposing; a forced `--strip-accents` on such text is warned about, not refused
(multilingual BERT-uncased was trained that way, and reproducing it is legitimate).

Byte-level BPE and Unigram tokenizers (`subword_normalizer`) get the same two switches
through the same BertNormalizer, without BERT's spaces around CJK ideographs (their
pre-tokenizers keep ideographs inside words, as RoBERTa's and SentencePiece's do), then
NFC: these files are read whole by transformers' PreTrainedTokenizerFast, so a step
after the BertNormalizer is honoured. NFC and not SentencePiece's NFKC: NFKC rewrites
letters of the scripts kept intact here (Hangul compatibility jamo ㅋ U+314B -> conjoining
ᄏ U+110F, so "ㅋㅋ" is no longer the user's text; Thai and Lao SARA AM ำ -> ํ + า), and
turns m² into m2; NFC only recomposes (decomposed Hangul back into syllables).

Scripts are told by the first word of a character's Unicode name (LATIN, HANGUL, CJK,
DEVANAGARI, ...), over letters and marks only (categories L and M): digits, punctuation,
symbols and emoji belong to no script here. Marks named COMBINING... or VARIATION...
(shared by every script) count as "Inherited".
"""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field

from tokenizers import normalizers

# auto strips accents only when at least this share of the sample's letters and marks is
# Latin, Greek or Cyrillic (the scripts BERT-uncased's stripping was made for) ...
AUTO_STRIP_MIN_LGC = 0.99
# ... and stripping alters at most this share of the characters of every script that
# holds SCRIPT_MIN_SHARE of them: French loses 2-4% of its Latin letters' accents and
# is stripped as BERT-uncased would; Vietnamese (tones on most syllables) is not.
AUTO_STRIP_MAX_ALTERED = 0.05
# A script is judged (for auto and for warnings) once it holds this share of the letters,
# so a stray word of another script in a large corpus decides nothing.
SCRIPT_MIN_SHARE = 0.001
# Warn when the chosen options alter more than this share of a judged script's characters.
WARN_ALTERED = 0.01
LGC = ("Latin", "Greek", "Cyrillic")

# Names whose first word is not their script.
_PREFIXES = ("FULLWIDTH", "HALFWIDTH", "SUPERSCRIPT")
_SPECIAL = {"MICRO": "Greek", "OHM": "Greek", "FEMININE": "Latin", "MASCULINE": "Latin", "KELVIN": "Latin",
            "ANGSTROM": "Latin", "KATAKANA-HIRAGANA": "Katakana", "COMBINING": "Inherited",
            "VARIATION": "Inherited", "CJK": "CJK"}


def script_of(ch: str) -> str | None:
    """The script of a letter or mark ("Latin", "Hangul", "CJK", "Inherited", "Other"); None
    for any other character (digits, punctuation, symbols, spaces, controls)."""
    if unicodedata.category(ch)[0] not in "LM":
        return None
    try:
        words = unicodedata.name(ch).split()
    except ValueError:  # unnamed (some ideographs of newer Unicode versions than Python's)
        return "Other"
    while len(words) > 1 and words[0] in _PREFIXES:
        words = words[1:]
    return _SPECIAL.get(words[0]) or words[0].title()


def bert_normalizer(lowercase: bool, strip_accents: bool) -> normalizers.BertNormalizer:
    """BERT's normaliser with accent stripping separate from lower-casing."""
    return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                      strip_accents=bool(strip_accents), lowercase=bool(lowercase))


def subword_normalizer(lowercase: bool, strip_accents: bool) -> normalizers.Sequence:
    """The normaliser of a byte-level BPE or Unigram tokenizer (module docstring): BERT's
    cleaning, lower-casing and accent stripping, no CJK spacing, then NFC."""
    return normalizers.Sequence([
        normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=bool(strip_accents),
                                   lowercase=bool(lowercase)),
        normalizers.NFC(),
    ])


@dataclass
class ScriptStats:
    """Letters and marks of one script in the sample, and what the options do to them."""

    characters: int = 0  # occurrences
    altered: int = 0  # occurrences the options change beyond case
    example: str = ""  # the most frequent altered character
    example_count: int = 0

    def altered_share(self) -> float:
        return self.altered / self.characters if self.characters else 0.0


def script_stats(raw_counts: dict[str, int], lowercase: bool, strip_accents: bool) -> dict[str, ScriptStats]:
    """Per script: occurrences of its letters and marks in `raw_counts` (raw character ->
    occurrences) and how many the normaliser alters beyond what lower-casing alone does."""
    chosen = bert_normalizer(lowercase, strip_accents)
    case_only = bert_normalizer(lowercase, False)
    stats: dict[str, ScriptStats] = {}
    for ch, count in raw_counts.items():
        script = script_of(ch)
        if script is None:
            continue
        entry = stats.setdefault(script, ScriptStats())
        entry.characters += count
        if strip_accents and chosen.normalize_str(ch) != case_only.normalize_str(ch):
            entry.altered += count
            if (count, -ord(ch)) > (entry.example_count, -ord(entry.example or "\0")):
                entry.example, entry.example_count = ch, count
    return stats


@dataclass
class Normalisation:
    """What the tokenizer does to text before splitting it, and why."""

    lowercase: bool
    strip_accents: bool
    chosen_by: str  # "auto" or "option" (accent stripping given by the user)
    reason: str  # one clause: why auto chose this; "" when given
    scripts: dict[str, float] = field(default_factory=dict)  # script -> share of letters, largest first
    altered: dict[str, float] = field(default_factory=dict)  # judged script -> share altered (stripping only)
    warnings: list[str] = field(default_factory=list)

    @property
    def google_compatible(self) -> bool:
        """Google's tokenization.py has one switch: do_lower_case lower-cases AND strips."""
        return self.lowercase == self.strip_accents

    def describe(self) -> str:
        case = "lower-case" if self.lowercase else "cased"
        accents = "strip accents" if self.strip_accents else "accents kept"
        how = f"auto: {self.reason}" if self.chosen_by == "auto" else \
            ("--strip-accents" if self.strip_accents else "--no-strip-accents")
        return f"{case}, {accents} ({how})"

    def describe_scripts(self, top: int = 5) -> str:
        """"Hangul 91.2%, Latin 6.1%, CJK 1.4%, other 1.3%" (letters and marks only)."""
        if not self.scripts:
            return "no letters"
        shown = list(self.scripts.items())[:top]
        text = ", ".join(f"{name} {_percent(share)}" for name, share in shown)
        rest = 1.0 - sum(share for _, share in shown)
        return text + (f", other {_percent(rest)}" if len(self.scripts) > top else "")

    def google_note(self) -> str | None:
        if self.google_compatible:
            return None
        what = "lower-casing without accent stripping" if self.lowercase else "accent stripping without lower-casing"
        return (f"Google's tokenization.py cannot reproduce {what} (its do_lower_case does both or neither); "
                "tokenizers and transformers read strip_accents")

    def summary_lines(self) -> list[str]:
        lines = [f"normalisation: {self.describe()}", f"scripts: {self.describe_scripts()}"]
        note = self.google_note()
        return lines + ([f"note: {note}"] if note else [])


def choose_normalisation(raw_counts: dict[str, int], lowercase: bool,
                         strip_accents: bool | None) -> Normalisation:
    """Accent stripping for a sample with these raw character counts: `strip_accents` when
    given, else auto (module docstring); with the script mix and the warnings."""
    probe = script_stats(raw_counts, lowercase, True)
    letters = sum(s.characters for s in probe.values())
    order = sorted(probe, key=lambda name: (-probe[name].characters, name))
    scripts = {name: probe[name].characters / letters for name in order} if letters else {}
    judged = [name for name in order if scripts[name] >= SCRIPT_MIN_SHARE]
    if strip_accents is None:
        # The Latin/Greek/Cyrillic share in one division of counts: summing the rounded
        # per-script shares put exactly 99% (83:8:8 of the three, 1 other) just under 0.99.
        lgc = sum(probe[name].characters for name in LGC if name in probe) / letters if letters else 1.0
        strip_accents, reason = _auto(lowercase, lgc, {name: probe[name] for name in judged})
        chosen_by = "auto"
    else:
        chosen_by, reason = "option", ""
    norm = Normalisation(lowercase=bool(lowercase), strip_accents=bool(strip_accents), chosen_by=chosen_by,
                         reason=reason, scripts=scripts)
    if norm.strip_accents:
        norm.altered = {name: probe[name].altered_share() for name in judged}
        hit = [name for name in judged if probe[name].altered_share() > WARN_ALTERED]
        if hit:
            norm.warnings.append(_altered_warning(hit, probe, lowercase, chosen_by))
    return norm


def _percent(share: float) -> str:
    return f"{share:.1%}" if share >= 0.0005 or share == 0 else "<0.1%"


def _auto(lowercase: bool, lgc: float, judged: dict[str, ScriptStats]) -> tuple[bool, str]:
    if not lowercase:
        return False, "cased"
    if lgc < AUTO_STRIP_MIN_LGC:
        return False, f"{lgc:.1%} of the letters are Latin, Greek or Cyrillic"
    worst = max(judged, key=lambda name: (judged[name].altered_share(), name), default=None)
    if worst is not None and judged[worst].altered_share() > AUTO_STRIP_MAX_ALTERED:
        return False, f"stripping would alter {judged[worst].altered_share():.1%} of the {worst} characters"
    return True, f"{lgc:.1%} of the letters are Latin, Greek or Cyrillic"


def _altered_warning(hit: list[str], probe: dict[str, ScriptStats], lowercase: bool, chosen_by: str) -> str:
    shares = ", ".join(f"{probe[name].altered_share():.1%} of the {name} characters" for name in hit[:3])
    if len(hit) > 3:
        shares += f" and {len(hit) - 3} more scripts"
    worst = max(hit, key=lambda name: (probe[name].altered_share(), name))
    ch = probe[worst].example
    out = bert_normalizer(lowercase, True).normalize_str(ch)
    example = f"{ch!r} (U+{ord(ch):04X}) -> {out!r} ({' '.join(f'U+{ord(c):04X}' for c in out) or 'deleted'})"
    how = "auto" if chosen_by == "auto" else "--strip-accents"
    return (f"accent stripping ({how}) changes letters beyond case: it alters {shares} of the training sample "
            f"(e.g. {example}); --no-strip-accents keeps them")
