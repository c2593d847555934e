"""bertprep.corpus.sentences: exact splits on real text from the shared data and on the rules,
in English, Korean, Chinese, Japanese and Hindi.

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
        ("「行こう。」と彼は言った。", ["「行こう。」と彼は言った。"]),  # the quotative と continues it
        ("「行こう。」そして彼は去った。", ["「行こう。」", "そして彼は去った。"]),
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


@pytest.mark.parametrize(
    "text, expected",
    [
        # Korean: a space after the stop, sentence-final endings, no case to go by
        ("안녕하세요. 저는 학생입니다. 왜 그런가요? 도와주세요!",
         ["안녕하세요.", "저는 학생입니다.", "왜 그런가요?", "도와주세요!"]),
        # no space after the stop: after a final ending or a ?/!, not inside 초.중.고 or 3.5
        ("계십니다.또 있습니다.정말요?네 초.중.고 학생 3.5명", ["계십니다.", "또 있습니다.", "정말요?", "네 초.중.고 학생 3.5명"]),
        # an ellipsis ends a sentence after a final ending only
        ("그런데.. 저는 힘듭니다... 그래서 왔습니다", ["그런데.. 저는 힘듭니다...", "그래서 왔습니다"]),
        # list items, dates and Korean list letters keep their dot
        ("방법입니다. 1. 홍보 2. 참여 가. 첫째 2018. 10. 14. 사건이 있었다.",
         ["방법입니다.", "1. 홍보 2. 참여 가. 첫째 2018. 10. 14. 사건이 있었다."]),
        ("급하다면서 10. 14에 신문했다. 끝났다.", ["급하다면서 10. 14에 신문했다.", "끝났다."]),
        # the formal ending -니다 ends a sentence with no stop at all
        ("힘들었습니다 그래서 청원합니다", ["힘들었습니다", "그래서 청원합니다"]),
        # a quoted question followed by the quotative particle stays one sentence
        ('그는 "왜요?"라고 물었다. 대답은 없었다.', ['그는 "왜요?"라고 물었다.', "대답은 없었다."]),
        # abbreviations and initials before Hangul still bind
        ("Mr. 김과 J. 박이 왔다. 끝.", ["Mr. 김과 J. 박이 왔다.", "끝."]),
        # Chinese: no spaces, full-width stops, quotes and book-title brackets
        ("我们走吧。他说：“今天很好。明天也好。”然后他走了！你去吗？",
         ["我们走吧。", "他说：“今天很好。明天也好。”", "然后他走了！", "你去吗？"]),
        ("你好吗?我很好。", ["你好吗?", "我很好。"]),
        # Japanese: stops inside 「」 and 『』 do not end the sentence
        ("彼は「今日は晴れ。明日は雨。」と言った。『本。』を読む。",
         ["彼は「今日は晴れ。明日は雨。」と言った。", "『本。』を読む。"]),
        # Hindi: the danda, with and without a space; a verse number stays with its verse
        ("राम घर गया। सीता बाज़ार गई।वह खुश थी। क्या तुम आओगे? हाँ!",
         ["राम घर गया।", "सीता बाज़ार गई।", "वह खुश थी।", "क्या तुम आओगे?", "हाँ!"]),
        ("धर्म की जय हो ॥१॥ अधर्म का नाश हो ॥२॥", ["धर्म की जय हो ॥१॥", "अधर्म का नाश हो ॥२॥"]),
        # Hindi abbreviations and one-letter initials before a caseless letter
        ("डॉ. शर्मा और के. आर. नारायणन आए. वे 1947 ई. में जन्मे.",
         ["डॉ. शर्मा और के. आर. नारायणन आए.", "वे 1947 ई. में जन्मे."]),
    ],
)
def test_other_scripts(text, expected):
    assert split_sentences(text) == expected


# Golden rules of the Pragmatic Segmenter, as pySBD's tests give them (MIT licence):
# tests/lang/test_chinese.py, test_japanese.py and test_hindi.py.
@pytest.mark.parametrize(
    "text, expected",
    [
        ("安永已聯繫周怡安親屬，協助辦理簽證相關事宜，周怡安家屬1月1日晚間搭乘東方航空班機抵達上海，他們步入入境大廳時神情落寞、不發一語。"
         "周怡安來自台中，去年剛從元智大學畢業，同年9月加入安永。",
         ["安永已聯繫周怡安親屬，協助辦理簽證相關事宜，周怡安家屬1月1日晚間搭乘東方航空班機抵達上海，他們步入入境大廳時神情落寞、不發一語。",
          "周怡安來自台中，去年剛從元智大學畢業，同年9月加入安永。"]),
        ("我们明天一起去看《摔跤吧！爸爸》好吗？好！", ["我们明天一起去看《摔跤吧！爸爸》好吗？", "好！"]),
        ("これはペンです。それはマーカーです。", ["これはペンです。", "それはマーカーです。"]),
        ("それは何ですか？ペンですか？", ["それは何ですか？", "ペンですか？"]),
        ("良かったね！すごい！", ["良かったね！", "すごい！"]),
        ("自民党税制調査会の幹部は、「引き下げ幅は３．２９％以上を目指すことになる」と指摘していて、今後、公明党と合意したうえで、"
         "３０日に決定する与党税制改正大綱に盛り込むことにしています。２％台後半を目指すとする方向で最終調整に入りました。",
         ["自民党税制調査会の幹部は、「引き下げ幅は３．２９％以上を目指すことになる」と指摘していて、今後、公明党と合意したうえで、"
          "３０日に決定する与党税制改正大綱に盛り込むことにしています。", "２％台後半を目指すとする方向で最終調整に入りました。"]),
        ("सच्चाई यह है कि इसे कोई नहीं जानता। हो सकता है यह फ़्रेन्को के खिलाफ़ कोई विद्रोह रहा हो, या फिर बेकाबू हो गया कोई आनंदोत्सव।",
         ["सच्चाई यह है कि इसे कोई नहीं जानता।",
          "हो सकता है यह फ़्रेन्को के खिलाफ़ कोई विद्रोह रहा हो, या फिर बेकाबू हो गया कोई आनंदोत्सव।"]),
    ],
)
def test_pragmatic_segmenter_golden_rules(text, expected):
    assert split_sentences(text) == expected


PETITIONS = DATA / "korean" / "petitions"


def petition(name: str, line: int) -> str:
    path = PETITIONS / name
    if not path.is_file():
        pytest.skip(f"shared data not found at {path}")
    import json

    return json.loads(path.read_text(encoding="utf-8").split("\n")[line])["content"]


def test_korean_petition():
    """The first petition of August 2017, a paragraph of 32 sentences with a space after
    every stop; the splitter before Korean rules found 1 (no uppercase letter follows)."""
    text = petition("petitions_2017-08", 0)
    sentences = split_sentences(text)
    assert len(sentences) == 32
    assert sentences[:2] == ["안녕하세요.", "현재 사대, 교대 등 교원양성학교들의 예비교사들이 임용절벽에 매우 힘들어 하고 있는 줄로 압니다."]
    assert sentences[13:16] == ["영양사분들 정말 너무나 고마운 분들입니다.", "학생들의 건강과 영양?",
                                "당연히 성장기에 있는 아이들에게 필수적이고 중요한 문제입니다."]
    assert sentences[-1] == "부디 넓은 안목으로 멀리 내다봐주시길 간곡히 부탁드립니다."
    assert "".join(sentences).replace(" ", "") == text.replace(" ", "")


def test_korean_petitions_without_spaces_and_with_lists():
    """Stops with no space after them ("계십니다.또") and numbered items ("1.저희",
    "1. 어플리케이션"): the item numbers stay with their items."""
    sentences = split_sentences(petition("petitions_2019-06", 235))
    assert sentences[2] == "1.저희 학교가 좋은 학교이기 때문입니다."
    assert sentences[4].endswith("노력하고 계십니다.") and sentences[5] == "또 각종 동아리들도 있습니다."
    sentences = split_sentences(petition("petitions_2017-08", 98))
    assert sentences[4:6] == ["방법은 아래와 같습니다.", "1. 어플리케이션 다운로드 홍보 2. 시민이 원하는 개선사항 혹은 정책 에 대한 글을 적을 수 있도록 합니다."]
    assert "5. 투표로 선정된 상위 5개의 정책 혹은 개선사항들을 공표합니다." in sentences


# Sentence ends beside numbers, dates, abbreviations, quotes and brackets, the Korean
# endings one by one, the danda and the CJK stops: each split written by hand.
@pytest.mark.parametrize(
    "text, expected",
    [
        # An ellipsis ends a sentence after a Korean final ending (다 요 까 죠 네 오 음 함) only
        ("어제 갔다... 그래서 왔다.", ["어제 갔다...", "그래서 왔다."]),
        ("좋아요... 그래서 왔다.", ["좋아요...", "그래서 왔다."]),
        ("그럴까... 모르겠다.", ["그럴까...", "모르겠다."]),
        ("그렇죠... 그래서 왔다.", ["그렇죠...", "그래서 왔다."]),
        ("좋네... 그래서 왔다.", ["좋네...", "그래서 왔다."]),
        ("들어오시오... 그래서 왔다.", ["들어오시오...", "그래서 왔다."]),
        ("제출했음... 다음 건.", ["제출했음...", "다음 건."]),
        ("확인함... 다음 건.", ["확인함...", "다음 건."]),
        ("힘들어요… 그래서 왔어요.", ["힘들어요…", "그래서 왔어요."]),
        ("그런데… 저는 왔다.", ["그런데… 저는 왔다."]),
        ("했습니다...그리고 갔다.", ["했습니다...", "그리고 갔다."]),
        ("그런데...그리고 갔다.", ["그런데...그리고 갔다."]),
        ("괜찮습니까? 네, 괜찮아요. 다행이네요! 그럼 가죠.", ["괜찮습니까?", "네, 괜찮아요.", "다행이네요!", "그럼 가죠."]),
        ("정말요?? 네!! 좋아요.", ["정말요??", "네!!", "좋아요."]),
        ("대박! 진짜 좋다.", ["대박!", "진짜 좋다."]),  # ! and ? end a sentence after any word
        ("정말 끝. 이제 가자.", ["정말 끝.", "이제 가자."]),  # one syllable, not a list letter (가. 나.)
        # Korean quotes: a quotative particle after the closing quote continues the sentence
        ("그는 '알겠습니다.'라고 답했다. 끝났다.", ["그는 '알겠습니다.'라고 답했다.", "끝났다."]),
        ('"정말요?" 그가 물었다.', ['"정말요?"', "그가 물었다."]),
        ("그는 “괜찮아요.” 그녀는 웃었다.", ["그는 “괜찮아요.”", "그녀는 웃었다."]),
        ("(참고 자료입니다.) 다음 내용입니다.", ["(참고 자료입니다.)", "다음 내용입니다."]),
        # Korean dates: the dots of 2024. 3. 1. never end a sentence before Hangul
        ("오늘은 2024. 3. 1. 삼일절입니다. 내일은 쉽니다.", ["오늘은 2024. 3. 1. 삼일절입니다.", "내일은 쉽니다."]),
        ("행사는 2024. 3. 1.에 열립니다. 모두 오세요.", ["행사는 2024. 3. 1.에 열립니다.", "모두 오세요."]),
        ("기간은 2024. 3. 1.~2024. 3. 31. 입니다. 감사합니다.", ["기간은 2024. 3. 1.~2024. 3. 31. 입니다.", "감사합니다."]),
        ("The law took effect on 2024. 3. 1. It was new.", ["The law took effect on 2024. 3. 1.", "It was new."]),
        ("It ended in 2023. 3 people died.", ["It ended in 2023.", "3 people died."]),
        # numbers
        ("성장률은 3.5%였다. 다음 해는 4.2%였다.", ["성장률은 3.5%였다.", "다음 해는 4.2%였다."]),
        ("The rate was 3.5. Then it fell.", ["The rate was 3.5.", "Then it fell."]),
        ("He scored 10. The team won.", ["He scored 10.", "The team won."]),
        ("1. 첫째 항목입니다. 2. 둘째 항목입니다.", ["1. 첫째 항목입니다.", "2. 둘째 항목입니다."]),
        ("가. 첫째입니다. 나. 둘째입니다.", ["가. 첫째입니다.", "나. 둘째입니다."]),
        ("3.1절 행사입니다. 끝.", ["3.1절 행사입니다.", "끝."]),
        # abbreviations
        ("He moved to the U.S. in 1990. He liked it.", ["He moved to the U.S. in 1990.", "He liked it."]),
        ("The U.S. Army left. Then peace came.", ["The U.S. Army left.", "Then peace came."]),
        ("He wore No. 5 all season. He retired.", ["He wore No. 5 all season.", "He retired."]),
        ("Fig. 3 shows it. Vol. 2 follows.", ["Fig. 3 shows it.", "Vol. 2 follows."]),
        ("It costs 5 p. The end.", ["It costs 5 p.", "The end."]),
        ("We met at 5 p.m. on Friday. Then we left.", ["We met at 5 p.m. on Friday.", "Then we left."]),
        ("Dr. Kim and Prof. Lee met Mr. Park. They talked.", ["Dr. Kim and Prof. Lee met Mr. Park.", "They talked."]),
        ("Sales rose in Jan. and Feb. of 2024. Then they fell.", ["Sales rose in Jan. and Feb. of 2024.", "Then they fell."]),
        ("He lives on Baker St. in London. It is busy.", ["He lives on Baker St. in London.", "It is busy."]),
        ("그래서 U.S. 정부는 반대했다. 끝났다.", ["그래서 U.S. 정부는 반대했다.", "끝났다."]),
        # closing quotes and brackets after the terminator
        ('She said, "It is over." Then she left.', ['She said, "It is over."', "Then she left."]),
        ("He asked, 'Why?' Nobody answered.", ["He asked, 'Why?'", "Nobody answered."]),
        ("It ended (finally). Then we left.", ["It ended (finally).", "Then we left."]),
        ("(It was late.) We left.", ["(It was late.)", "We left."]),
        ('"Stop!" he said. We stopped.', ['"Stop!" he said.', "We stopped."]),
        # Hindi: the danda, ? and !, quotes
        ("मैं घर जा रहा हूँ। तुम कहाँ हो? मुझे नहीं पता!", ["मैं घर जा रहा हूँ।", "तुम कहाँ हो?", "मुझे नहीं पता!"]),
        ('राम ने कहा, "मैं जाऊँगा।" फिर वह चला गया।', ['राम ने कहा, "मैं जाऊँगा।"', "फिर वह चला गया।"]),
        ("यह अच्छा है॥ वह भी।", ["यह अच्छा है॥", "वह भी।"]),
        ("वाह! बहुत अच्छा।", ["वाह!", "बहुत अच्छा।"]),
        # Chinese and Japanese: 。！？ and the halfwidth ｡, whatever follows
        ("今天天气很好｡明天下雨｡", ["今天天气很好｡", "明天下雨｡"]),
        ("今天天气很好。 明天下雨。", ["今天天气很好。", "明天下雨。"]),
        ("你好！！我很好。", ["你好！！", "我很好。"]),
        ("本当ですか？！はい。", ["本当ですか？！", "はい。"]),
        ("「はい。」と答えた。次に行った。", ["「はい。」と答えた。", "次に行った。"]),
        ("他说：「我们走吧。」然后走了。", ["他说：「我们走吧。」", "然后走了。"]),
        # Cyrillic and Spanish sentence starts; a newline or no-break space after the stop
        ("Он пришёл. Она ушла.", ["Он пришёл.", "Она ушла."]),
        ("Hola. ¿Cómo estás?", ["Hola.", "¿Cómo estás?"]),
        ("Hello.\nWorld.\xa0Again.", ["Hello.", "World.", "Again."]),
    ],
)
def test_boundaries_at_the_edges(text, expected):
    assert split_sentences(text) == expected


def test_a_cjk_quote_is_tracked_back_300_characters():
    """A 。 inside 「」 does not end the sentence; an opener more than 300 characters back
    is taken as never closed, so the 。 does."""
    quoted = "「" + "あ" * 250 + "。次。」終わり。次の文。"
    assert split_sentences(quoted) == ["「" + "あ" * 250 + "。次。」", "終わり。", "次の文。"]
    unclosed = "「" + "あ" * 350 + "。次の文。"
    assert split_sentences(unclosed) == ["「" + "あ" * 350 + "。", "次の文。"]


def test_splitting_real_text_loses_nothing_but_whitespace():
    """Every character of 300 petitions, WikiText's paragraphs and the Hindi lines is in
    exactly one sentence, in order; sentences are stripped and never empty."""
    import gzip
    import json

    texts = [json.loads(line)["content"] for line in _lines(PETITIONS / "petitions_2019-06")[:300] if line]
    texts += _lines(WIKITEXT)
    texts += gzip.open(pathlib.Path(__file__).parent / "data" / "hindi-gnome-messages.txt.gz", "rt",
                       encoding="utf-8").read().split("\n")
    for text in texts:
        sentences = split_sentences(text)
        assert all(s and s == s.strip() for s in sentences)
        assert "".join("".join(s.split()) for s in sentences) == "".join(text.split())


def _lines(path: pathlib.Path) -> list[str]:
    if not path.is_file():
        pytest.skip(f"shared data not found at {path}")
    return path.read_text(encoding="utf-8").split("\n")
