"""The arithmetic of a mix (bertprep.corpus.mix), against its definition computed here:
share_i = w_i / sum(w) with weights, else n_i**T / sum(n_j**T) over sizes n in
characters (T=1 natural, T=0 equal); rate_i = share_i x N / n_i, read as floor(rate)
whole copies and one partial copy; the partial copy keeps the documents whose 64-bit
priority hash is below a threshold, so over many documents the count kept is binomial;
and what the manifest records of it."""
from __future__ import annotations

import functools
import hashlib
import json
import math

import pytest

from bertprep.corpus import MixPlan, MixSource
from bertprep.corpus.mix import document_priority, keeps, mix_summary, size_of
from shared_data import SHARED_DATA

PETITIONS = SHARED_DATA / "korean" / "petitions" / "petitions_2017-08"
WIKITEXT = SHARED_DATA / "wikitext-2-raw-train-head.txt"
# Characters of three sources: 240 petitions, WikiText's first articles, a small third.
SIZES = {"ko": 216_533, "en": 78_263, "hi": 9_001}


def plan_of(sizes: dict[str, int], weights: dict[str, float] | None = None, temperature: float | None = None,
            histograms: dict[str, list[int]] | None = None) -> MixPlan:
    sources = tuple(MixSource(name, f"{name}/*", None if weights is None else weights[name]) for name in sizes)
    ones = dict.fromkeys(sizes, 1)
    histograms = histograms or {name: [size] + [0] * 1023 for name, size in sizes.items()}
    return MixPlan(sources, temperature, 0, dict(sizes), ones, ones, histograms)


def expected_copies(rate: float) -> list[float]:
    """floor(rate) whole copies, then the fraction left (a rate within 1e-9 of a whole
    number of copies is that number: shares computed in floating point)."""
    whole = round(rate) if abs(rate - round(rate)) <= 1e-9 else math.floor(rate)
    return [1.0] * whole + ([rate - whole] if rate - whole > 1e-9 else [])


@pytest.mark.parametrize("temperature", [0.0, 0.3, 0.5, 0.7, 1.0, None, 2.0])
def test_temperature_shares_are_size_to_the_power_t(temperature):
    plan = plan_of(SIZES, temperature=temperature)
    exponent = 1.0 if temperature is None else temperature  # no temperature and no weights: natural shares
    powered = {name: float(n) ** exponent for name, n in SIZES.items()}
    expected = {name: p / math.fsum(powered.values()) for name, p in powered.items()}
    shares = plan.target_shares()
    assert shares == pytest.approx(expected, rel=1e-12)
    total = sum(SIZES.values())
    rates = plan.rates()
    assert rates == pytest.approx({name: expected[name] * total / SIZES[name] for name in SIZES}, rel=1e-12)
    for name in SIZES:
        assert plan.keep_fractions(name) == pytest.approx(expected_copies(rates[name]), rel=1e-9, abs=1e-12)
    # The corpus keeps its natural total: the sampled characters sum to N.
    assert math.fsum(rates[name] * SIZES[name] for name in SIZES) == pytest.approx(total, rel=1e-12)


def test_temperature_limits():
    equal = plan_of(SIZES, temperature=0.0)
    assert equal.target_shares() == {name: 1 / 3 for name in SIZES}  # (n / max) ** 0 is exactly 1
    # The smallest source, 3% of the text, is a third of the corpus: read 11.2 times.
    hi_rate = (1 / 3) * sum(SIZES.values()) / SIZES["hi"]
    assert equal.rates()["hi"] == pytest.approx(hi_rate, rel=1e-12) and math.floor(hi_rate) == 11
    assert len(equal.keep_fractions("hi")) == 12 and equal.keep_fractions("hi")[:11] == [1.0] * 11
    natural = plan_of(SIZES, temperature=1.0)
    assert natural.rates() == pytest.approx(dict.fromkeys(SIZES, 1.0), rel=1e-12)
    assert all(natural.keep_fractions(name) == [1.0] for name in SIZES)  # every document once, none dropped
    assert plan_of(SIZES).target_shares() == natural.target_shares()
    # Flattening moves share from the largest source to the smallest, monotonically in T.
    shares = [plan_of(SIZES, temperature=t).target_shares() for t in (1.0, 0.7, 0.5, 0.3, 0.0)]
    assert [s["hi"] for s in shares] == sorted(s["hi"] for s in shares)
    assert [s["ko"] for s in shares] == sorted((s["ko"] for s in shares), reverse=True)


@pytest.mark.parametrize("weights", [
    {"ko": 1, "en": 1, "hi": 1},  # thirds: no weight divides 1 evenly
    {"ko": 0.7, "en": 0.2, "hi": 0.1},  # sums to 0.9999999999999999 in floating point
    {"ko": 5, "en": 3, "hi": 1},
    {"ko": 1e-3, "en": 2e-3, "hi": 4e-3},
])
def test_weights_are_shares_whatever_the_sizes(weights):
    plan = plan_of(SIZES, weights=weights)
    total_weight = sum(weights.values())
    expected = {name: w / total_weight for name, w in weights.items()}
    assert plan.target_shares() == pytest.approx(expected, rel=1e-12)
    assert math.fsum(plan.target_shares().values()) == pytest.approx(1.0, abs=1e-15)
    total = sum(SIZES.values())
    for name in SIZES:
        rate = expected[name] * total / SIZES[name]
        assert plan.rates()[name] == pytest.approx(rate, rel=1e-12)
        assert plan.keep_fractions(name) == pytest.approx(expected_copies(rate), rel=1e-9, abs=1e-12)
    # The same weights over other sizes give the same shares.
    assert plan_of({"ko": 10, "en": 10, "hi": 10}, weights=weights).target_shares() == plan.target_shares()


def test_a_whole_number_of_copies_has_no_partial_copy():
    """Weights 1:3 over 300 and 100 characters: en is read exactly 3 times, ko a third."""
    plan = plan_of({"ko": 300, "en": 100}, weights={"ko": 1, "en": 3})
    assert plan.keep_fractions("en") == [1.0, 1.0, 1.0]
    assert plan.keep_fractions("ko") == pytest.approx([1 / 3], rel=1e-12)
    assert [threshold for _, threshold in plan.copies("en")] == [1 << 64] * 3  # keep everything
    assert plan.tolerance("en") == 0
    # Weights 0.1:0.1:0.6 are 1:1:6, so c (100 of 400 characters) is read exactly 3 times,
    # though its rate computes to 2.9999999999999996: no fourth copy keeping almost all.
    floating = plan_of({"a": 100, "b": 200, "c": 100}, weights={"a": 0.1, "b": 0.1, "c": 0.6})
    assert floating.rates()["c"] != 3.0 and floating.rates()["c"] == pytest.approx(3.0, rel=1e-15)
    assert floating.keep_fractions("c") == [1.0, 1.0, 1.0]
    assert [threshold for _, threshold in floating.copies("c")] == [1 << 64] * 3


def test_manifest_record_and_summary_line():
    """Every field of the record, worked out by hand for ko 300 / en 150 characters asked
    1:3 (rates 0.375 and 2.25): ko's only copy and en's third end in buckets holding 120
    and 90 of their characters."""
    histograms = {"ko": [0] * 1024, "en": [0] * 1024}
    histograms["ko"][3], histograms["ko"][500], histograms["ko"][900] = 60, 120, 120  # 112.5 wanted: bucket 500
    histograms["en"][7], histograms["en"][600], histograms["en"][800] = 30, 90, 30  # 37.5 wanted: bucket 600
    plan = plan_of({"ko": 300, "en": 150}, weights={"ko": 1, "en": 3}, histograms=histograms)
    plan.add_kept("ko", 110, 2)
    for size in (150, 150, 35):
        plan.add_kept("en", size, 4)
    record = json.loads(json.dumps(plan.record()))  # as the manifest holds it
    ko, en = record.pop("sources")
    assert record == {"size_unit": "characters", "temperature": None, "seed": 0, "characters": 450,
                      "sampled_characters": 445}
    assert ko == {"name": "ko", "path": "ko/*", "weight": 1, "files": 1, "characters": 300, "documents": 1,
                  "natural_share": 300 / 450, "target_share": 0.25, "rate": 0.375, "copies": 1,
                  "target_characters": 112.5, "tolerance_characters": 120, "sampled_characters": 110,
                  "sampled_documents": 2, "achieved_share": 110 / 445}
    assert en == {"name": "en", "path": "en/*", "weight": 3, "files": 1, "characters": 150, "documents": 1,
                  "natural_share": 150 / 450, "target_share": 0.75, "rate": 2.25, "copies": 3,
                  "target_characters": 337.5, "tolerance_characters": 90, "sampled_characters": 335,
                  "sampled_documents": 12, "achieved_share": 335 / 445}
    assert mix_summary(plan.record()) == ("mix of 445 characters: ko 0.247 (asked 0.250, natural 0.667, x0.38), "
                                          "en 0.753 (asked 0.750, natural 0.333, x2.25)")
    tempered = plan_of({"ko": 300, "en": 150}, temperature=0.5)
    tempered.add_kept("ko", 1, 1)
    assert mix_summary(tempered.record()).startswith("mix of 1 characters, temperature 0.5: ko 1.000 (asked ")


def test_size_counts_characters_without_whitespace():
    assert size_of(["마스크 착용", " a\tb \u3000c\n"]) == 5 + 3  # a Hangul syllable is one, not three bytes
    assert size_of([]) == 0 and size_of(["   "]) == 0


@functools.cache
def _real_documents() -> list[list[str]]:
    """About 2,300 distinct real documents: WikiText-2 lines and petitions, one each."""
    if not WIKITEXT.is_file() or not PETITIONS.is_file():
        pytest.skip(f"shared data not found under {SHARED_DATA}")
    lines = WIKITEXT.read_text(encoding="utf-8").split("\n")
    lines += [json.loads(line)["content"] for line in PETITIONS.read_text(encoding="utf-8").split("\n")[:300] if line]
    distinct = {"".join(line.split()).replace("-", ""): line for line in lines if line.strip()}
    return [[line] for line in distinct.values()]


@functools.cache
def _priorities(source: str, seed: int) -> tuple[int, ...]:
    return tuple(document_priority(d, source, seed) for d in _real_documents())


def _within_binomial(count: int, n: int, p: float) -> bool:
    """Within 5 standard deviations of Binomial(n, p): what a uniform 64-bit hash gives
    but for a chance below 6e-7 (and the data and hash are fixed, so the test is too)."""
    return abs(count - n * p) <= 5 * math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("fraction", [0.02, 0.3, 0.5, 0.9])
def test_a_partial_copy_keeps_a_binomial_count_of_documents(fraction):
    """A threshold at `fraction` of the priority range keeps each document with that
    probability, whatever its text or position: the count kept is Binomial(n, fraction),
    and so is the overlap of two seeds' choices (Binomial(n, fraction**2): the seed
    redraws every document) and of two sources' (the name is in the hash)."""
    documents = _real_documents()
    n = len(documents)
    threshold = int(fraction * (1 << 64))
    kept = {i for i, d in enumerate(documents) if keeps(d, "en", threshold, seed=0)}
    assert _within_binomial(len(kept), n, fraction), (len(kept), n * fraction)
    # The first and second halves of the input are kept alike: position plays no part.
    first = sum(1 for i in kept if i < n // 2)
    assert _within_binomial(first, n // 2, fraction)
    assert {i for i, p in enumerate(_priorities("en", 0)) if p < threshold} == kept  # determinism per seed
    other_seed = {i for i, p in enumerate(_priorities("en", 1)) if p < threshold}
    other_source = {i for i, p in enumerate(_priorities("ko", 0)) if p < threshold}
    for other in (other_seed, other_source):
        assert _within_binomial(len(other), n, fraction)
        assert _within_binomial(len(kept & other), n, fraction ** 2), (len(kept & other), n * fraction ** 2)


def test_document_priority_is_blake2b_of_seed_source_and_text():
    """The priority's definition, which decides the documents a mix keeps in every
    version: 8 bytes of BLAKE2b (little-endian) over the seed, the source name and the
    text without whitespace, hyphens or soft hyphens (so a hyphenated word prose re-joins
    in one command only is the same document in both)."""
    document = ["Well-known  text,", "다음\u00ad문장\t끝"]
    key = "7\x1fen\x1f" + "Wellknowntext,다음문장끝"
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    assert document_priority(document, "en", 7) == int.from_bytes(digest, "little")
    assert document_priority(["Wellknown text,다음문장", "끝"], "en", 7) == document_priority(document, "en", 7)
    assert document_priority(document, "en", 8) != document_priority(document, "en", 7)
    assert document_priority(document, "ko", 7) != document_priority(document, "en", 7)
    # keeps: strictly below the threshold; a whole copy's threshold keeps everything.
    priority = document_priority(document, "en", 7)
    assert keeps(document, "en", priority + 1, 7) and not keeps(document, "en", priority, 7)
    assert keeps(document, "en", 1 << 64, 7)
