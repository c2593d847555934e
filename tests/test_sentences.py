"""bertprep.corpus.sentences: exact splits on real text from the shared data and on the rules.

Speed, measured on this 2-core machine (shared, so rough): 25 MB/s on the WikiExtractor
paragraphs of wiki_00 (about 20 words per sentence), 7 MB/s on a worst case of 13-byte
sentences ("Hello world. This is text. " repeated). Not asserted: see STYLE.md, habit 10.
"""
from __future__ import annotations

import pathlib

import pytest

from bertprep.corpus import split_sentences

from shared_data import SHARED_DATA as DATA  # noqa: E402  ../shared/data beside the checkout
WIKI_00 = DATA / "enwiki_wikiextractor" / "wiki_00"
WIKITEXT = DATA / "wikitext-2-raw-train-head.txt"


def paragraph(path: pathlib.Path, containing: str) -> str:
    if not path.is_file():
        pytest.skip(f"shared data not found at {path}")
    return next(line for line in path.read_text(encoding="utf-8").split("\n") if containing in line)


def test_wikipedia_abbreviations_circa_and_us():
    # wiki_00, "Aristotle": "c. AD 600", "c. 1100" are not boundaries
    assert split_sentences(paragraph(WIKI_00, "from c. AD 600")) == [
        "With the loss of the study of ancient Greek in the early medieval Latin West, Aristotle was "
        'practically unknown there from c. AD 600 to c. 1100 except through the Latin translation of the '
        '"Organon" made by Boethius.',
        "In the twelfth and thirteenth centuries, interest in Aristotle revived and Latin Christians had "
        "translations made, both from Arabic translations, such as those by Gerard of Cremona, and from the "
        "original Greek, such as those by James of Venice and William of Moerbeke.",
    ]
    # wiki_00, "Alabama": "U.S. forces"
    assert split_sentences(paragraph(WIKI_00, "to U.S. forces on April 13")) == [
        "After the French lost to the British in the Seven Years' War, it became part of British West Florida "
        "from 1763 to 1783.",
        "After the United States victory in the American Revolutionary War, the territory was divided between "
        "the United States and Spain.",
        "The latter retained control of this western territory from 1783 until the surrender of the Spanish "
        "garrison at Mobile to U.S. forces on April 13, 1813.",
    ]


def test_wikipedia_brackets_quotes_and_nbsp():
    sentences = split_sentences(paragraph(WIKI_00, "Mozi c. 400 BC"))
    assert sentences[:3] == [
        "Aristotle held more accurate theories on some optical concepts than other philosophers of his day.",
        "The second oldest written evidence of a camera obscura (after Mozi c. 400 BC) can be found in "
        "Aristotle's documentation of such a device in 350\xa0BC in \"Problemata\".",
        "Aristotle's apparatus contained a dark chamber that had a single small hole, or aperture, to allow "
        "for sunlight to enter.",
    ]
    assert len(sentences) == 6


def test_wikitext_tokens():
    # WikiText-2, "Tower Building of the Little Rock Arsenal": " @,@ " / " @.@ ", "B. Lee", "U.S. Army"
    sentences = split_sentences(paragraph(WIKITEXT, "Major Robert B. Lee of the U.S. Army"))
    assert sentences[1:6] == [
        "Thirty @-@ six acres were appropriated on the outskirts of Little Rock by Major Robert B. Lee of the U.S. Army .",
        "The land had been previously used as a racetrack by the local jockey club .",
        "John Wormley Walker , a builder for the Federal Government , supervised the construction .",
        "Originally $ 14 @,@ 000 was allocated for the construction of the arsenal , but proved inadequate .",
        "The budget was later increased to $ 30 @,@ 000 .",
    ]
    assert "( 0 @.@ 91 m ) exterior walls ." in sentences[7]
    assert len(sentences) == 10
    # "lit . Valkyria": WikiText's space before the full stop does not hide the abbreviation
    first = split_sentences(paragraph(WIKITEXT, "Senjō no Valkyria 3"))
    assert first[0].startswith("Senjō no Valkyria 3 : Unrecorded Chronicles ( Japanese : 戦場のヴァルキュリア3 , lit . Valkyria")
    assert first[0].endswith("developed by Sega and Media.Vision for the PlayStation Portable .")
    assert first[1] == "Released in January 2011 in Japan , it is the third game in the Valkyria series ."


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Dr. Watson arrived at 3.5 p.m. on Monday. He was late!", ["Dr. Watson arrived at 3.5 p.m. on Monday.", "He was late!"]),
        ("Mr. and Mrs. Smith met Prof. Jones. They talked.", ["Mr. and Mrs. Smith met Prof. Jones.", "They talked."]),
        ("J. R. R. Tolkien wrote it. Fans loved it.", ["J. R. R. Tolkien wrote it.", "Fans loved it."]),
        ("Fruit, e.g. Apples and pears, i.e. Food. Etc.", ["Fruit, e.g. Apples and pears, i.e. Food.", "Etc."]),
        ("See No. 5 and p. 12. Then stop.", ["See No. 5 and p. 12.", "Then stop."]),
        ("He said no. Then he left.", ["He said no.", "Then he left."]),
        ('"Go!" he said. "Stop." Then it ended.', ['"Go!" he said.', '"Stop."', "Then it ended."]),
        ("Really?! Yes... Fine. (Done.) Next.", ["Really?!", "Yes...", "Fine.", "(Done.)", "Next."]),
        ("The value is 3.14. It rises to 4.5.", ["The value is 3.14.", "It rises to 4.5."]),
        ("Call os.path.join. Then exit.", ["Call os.path.join.", "Then exit."]),
        ("It ended in 1990. 1991 began.", ["It ended in 1990.", "1991 began."]),
        ("lowercase after a stop. is no boundary.", ["lowercase after a stop. is no boundary."]),
        ("Émile came. Done. élan stays.", ["Émile came.", "Done. élan stays."]),
        ("東京に行った。とても楽しかった！また行く？うん", ["東京に行った。", "とても楽しかった！", "また行く？", "うん"]),
        ("「行こう。」と彼は言った。", ["「行こう。」", "と彼は言った。"]),
        ("  Leading and trailing space.   ", ["Leading and trailing space."]),
        ("", []),
        ("No terminal punctuation", ["No terminal punctuation"]),
    ],
)
def test_rules(text, expected):
    assert split_sentences(text) == expected


def test_the_sentences_cover_the_text():
    """Splitting loses nothing but whitespace between sentences."""
    text = paragraph(WIKI_00, "Mozi c. 400 BC")
    assert "".join(split_sentences(text)).replace(" ", "") == text.replace(" ", "")
