"""A mix of sources (bertprep.corpus.mix): Korean petitions and English WikiText from the
shared data, sampled to asked shares, the same documents for train-tokenizer and
build-shards, the same bytes for 1 and 2 workers, recorded in the manifest."""
from __future__ import annotations

import collections
import json
import math
from dataclasses import replace

import pytest
from click.testing import CliRunner

from bertprep.builder import BuildConfig, build_shards, plan_partitions, read_partition
from bertprep.cli import main
from bertprep.corpus import CorpusSpec, MixPlan, MixSource, ReadStats, iter_documents, measure_input, mix_inputs, plan_mix
from bertprep.corpus.mix import bucket_of, document_priority, keep_fractions, size_of, threshold_for
from bertprep.errors import BertprepError
from shard_fixtures import check_shard_dir, shard_bytes
from shared_data import SHARED_DATA

PETITIONS = SHARED_DATA / "korean" / "petitions" / "petitions_2017-08"
WIKITEXT = SHARED_DATA / "wikitext-2-raw-train-head.txt"


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """ko/: 240 real petitions in two JSONL files (field "content"); en/: the first
    articles of WikiText-2 (about 60 KB, a paragraph per line)."""
    if not PETITIONS.is_file() or not WIKITEXT.is_file():
        pytest.skip(f"shared data not found under {SHARED_DATA}")
    root = tmp_path_factory.mktemp("mix")
    petitions = PETITIONS.read_text(encoding="utf-8").split("\n")[:240]
    (root / "ko").mkdir()
    (root / "ko" / "a.jsonl").write_text("\n".join(petitions[:120]) + "\n", encoding="utf-8")
    (root / "ko" / "b.jsonl").write_text("\n".join(petitions[120:]) + "\n", encoding="utf-8")
    lines, size = [], 0
    for line in WIKITEXT.read_text(encoding="utf-8").split("\n"):
        if size > 60_000 and line.startswith(" = ") and not line.startswith(" = = "):
            break  # at the next article
        lines.append(line)
        size += len(line)
    (root / "en").mkdir()
    (root / "en" / "wiki.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def mix_spec(sources, mix="ko={root}/ko/*:0.3,en={root}/en/*:0.7", **fields) -> CorpusSpec:
    return CorpusSpec(mix=mix.format(root=sources), text_field="content", sentences="split", **fields)


def measured(spec: CorpusSpec) -> MixPlan:
    return plan_mix(spec, [measure_input(spec, name, path) for name, path in mix_inputs(spec)])


@pytest.fixture(scope="module")
def tokenizer(sources, tmp_path_factory):
    """A WordPiece vocabulary trained on the mix itself, through the CLI."""
    out = tmp_path_factory.mktemp("tok") / "tok"
    result = CliRunner().invoke(main, ["train-tokenizer", "--mix", f"ko={sources}/ko/*:0.3,en={sources}/en/*:0.7",
                                       "--text-field", "content", "--sentences", "split", "--out", str(out),
                                       "--vocab-size", "1500", "-q"])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("mix of "))
    assert "(asked 0.300, natural 0." in line and "(asked 0.700, natural 0." in line
    return out


def test_shares_rates_and_copies():
    """Weights normalise; size**T without them; rates keep the natural total; a rate of
    2.27 is two full copies and 0.27 of a third."""
    plan = MixPlan((MixSource("a", "a/*", 3.0), MixSource("b", "b/*", 1.0)), None, 0,
                   {"a": 100, "b": 300}, {"a": 1, "b": 1}, {"a": 1, "b": 1}, {"a": [100], "b": [300]})
    assert plan.target_shares() == {"a": 0.75, "b": 0.25}
    assert plan.rates() == {"a": 3.0, "b": 1 / 3}
    assert plan.keep_fractions("a") == [1.0, 1.0, 1.0] and plan.keep_fractions("b") == [1 / 3]
    tempered = MixPlan((MixSource("a", "a/*"), MixSource("b", "b/*")), 0.3, 0, plan.sizes, plan.documents,
                       plan.files, plan.histograms)
    shares = tempered.target_shares()
    assert math.isclose(shares["a"] / shares["b"], (100 / 300) ** 0.3, rel_tol=1e-12)
    assert math.isclose(math.fsum(shares.values()), 1.0, rel_tol=1e-12)
    assert keep_fractions(2.27)[:2] == [1.0, 1.0] and math.isclose(keep_fractions(2.27)[2], 0.27, rel_tol=1e-12)
    assert keep_fractions(2.0) == [1.0, 1.0] and keep_fractions(0.4) == [0.4]


def test_threshold_falls_inside_the_bucket_where_the_fraction_is_reached():
    histogram = [0] * 1024
    histogram[10], histogram[500], histogram[900] = 40, 20, 40
    threshold, tolerance = threshold_for(0.5, histogram)  # 40 below bucket 500, 10 of its 20 wanted
    assert threshold >> 54 == 500 and tolerance == 20
    assert threshold & ((1 << 54) - 1) == 1 << 53  # halfway through the bucket
    assert threshold_for(1.0, histogram) == (1 << 64, 0)


def test_achieved_mix_is_within_one_bucket_of_the_asked(sources):
    """Each source's kept characters are within its tolerance (the size of the priority
    bucket its threshold falls in: no document of a lower bucket is dropped, none of a
    higher one kept) of share x N; full copies keep every document."""
    for spec in (mix_spec(sources), mix_spec(sources, "ko={root}/ko/*,en={root}/en/*", sampling_temperature=0.3)):
        stats = ReadStats()
        documents = list(iter_documents(spec, stats))
        plan, natural = stats.mix, measured(spec)
        assert plan.sizes == natural.sizes and sum(plan.kept_sizes.values()) == sum(map(size_of, documents))
        record = plan.record()
        for source in record["sources"]:
            target, kept, tolerance = source["target_characters"], source["sampled_characters"], source["tolerance_characters"]
            assert abs(kept - target) <= tolerance, source
            # The tolerance is the size of the documents in the bucket of the last copy's
            # threshold, found again here from the documents as read.
            name, (_, threshold) = source["name"], plan.copies(source["name"])[-1]
            reading = spec.source_spec(next(s for s in spec.mix if s.name == name))
            in_bucket = sum(size_of(d) for d in iter_documents(reading)
                            if bucket_of(document_priority(d, name, spec.mix_seed)) == bucket_of(threshold))
            assert tolerance == in_bucket
        en = next(s for s in record["sources"] if s["name"] == "en")
        assert en["rate"] > 1 and en["copies"] == math.ceil(en["rate"])  # English is upsampled: repeated
        assert sum(s["target_share"] for s in record["sources"]) == pytest.approx(1.0, abs=1e-12)
        assert stats.documents == natural.documents["ko"] + natural.documents["en"]  # read stats count one copy


def test_both_commands_read_the_same_documents(sources):
    """The partitions build-shards plans keep exactly the documents train-tokenizer reads."""
    spec = mix_spec(sources)
    plan = measured(spec)
    planned = collections.Counter()
    for partition in plan_partitions(spec, 64 * 1024, plan):
        documents, counts = read_partition(partition, spec)
        planned.update(tuple(document) for document in documents)
        assert all(count["sampled_documents"] <= count["documents"] for count in counts)
    read = collections.Counter(tuple(document) for document in iter_documents(spec))
    assert planned == read
    # Each document is read floor(rate) or ceil(rate) times (times its count in the
    # source: identical documents share their priority): English, upsampled, is repeated.
    for source in spec.mix:
        rate = plan.rates()[source.name]
        natural = collections.Counter(tuple(d) for d in iter_documents(spec.source_spec(source)))
        assert {read[d] / count for d, count in natural.items()} == {math.floor(rate), math.ceil(rate)}
    assert math.floor(plan.rates()["en"]) >= 2 and plan.rates()["ko"] < 1


@pytest.mark.slow
def test_build_is_the_same_for_1_and_2_workers_and_records_the_mix(sources, tokenizer, tmp_path):
    spec = mix_spec(sources)
    outs = []
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        config = BuildConfig(workers=workers, dupe_factor=1, partition_bytes=64 * 1024, cache_dir=str(tmp_path / f"cache{workers}"))
        result = build_shards(spec, tokenizer, out, config, progress=False)
        outs.append(out)
    assert shard_bytes(outs[0]) == shard_bytes(outs[1])
    assert (outs[0] / "manifest.json").read_bytes() == (outs[1] / "manifest.json").read_bytes()
    check_shard_dir(outs[0])
    manifest = json.loads((outs[0] / "manifest.json").read_text())
    mix = manifest["mix"]
    assert manifest["corpus"]["mix"] == [{"name": "ko", "path": f"{sources}/ko/*", "weight": 0.3},
                                         {"name": "en", "path": f"{sources}/en/*", "weight": 0.7}]
    assert (mix["size_unit"], mix["temperature"], mix["seed"]) == ("characters", None, 0)
    assert [(s["name"], s["files"], s["target_share"]) for s in mix["sources"]] == [("ko", 2, 0.3), ("en", 1, 0.7)]
    library = ReadStats()
    kept = list(iter_documents(spec, library))  # what train-tokenizer reads
    assert [s["sampled_characters"] for s in mix["sources"]] == [library.mix.kept_sizes["ko"], library.mix.kept_sizes["en"]]
    assert [s["sampled_documents"] for s in mix["sources"]] == [library.mix.kept_documents["ko"], library.mix.kept_documents["en"]]
    assert manifest["totals"]["documents"] == len(kept)  # every kept document has tokens here
    assert result.read_stats.documents == library.documents  # the corpus, counted once


def test_fingerprint_covers_the_mix_and_rerun_is_complete(sources, tokenizer, tmp_path):
    out = tmp_path / "out"
    config = BuildConfig(workers=1, dupe_factor=1, partition_bytes=64 * 1024, cache_dir=str(tmp_path / "cache"))
    build_shards(mix_spec(sources), tokenizer, out, config, progress=False)
    assert build_shards(mix_spec(sources), tokenizer, out, config, progress=False).already_complete
    for other in (mix_spec(sources, "ko={root}/ko/*:0.5,en={root}/en/*:0.5"), mix_spec(sources, mix_seed=1)):
        with pytest.raises(BertprepError, match="already holds a finished build of other inputs, options, seed or tokenizer"):
            build_shards(other, tokenizer, out, config, progress=False)


def test_cli_summary_line(sources, tokenizer, tmp_path):
    result = CliRunner().invoke(main, ["build-shards", "--mix", f"ko={sources}/ko/*,en={sources}/en/*",
                                       "--sampling-temperature", "0.3", "--text-field", "content", "--sentences", "split",
                                       "--tokenizer", str(tokenizer), "--out", str(tmp_path / "out"), "--dupe-factor", "1",
                                       "--workers", "1", "--cache-dir", str(tmp_path / "cache"), "-q"])
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "out" / "manifest.json").read_text())["mix"]
    ko, en = record["sources"]
    assert f"  mix of {record['sampled_characters']:,} characters, temperature 0.3: ko {ko['achieved_share']:.3f} " \
           f"(asked {ko['target_share']:.3f}, natural {ko['natural_share']:.3f}, x{ko['rate']:.2f}), en " in result.output


@pytest.mark.parametrize("command", ["train-tokenizer", "build-shards"])
def test_a_source_that_matches_nothing_or_holds_no_text(sources, tokenizer, tmp_path, command):
    (tmp_path / "blank.txt").write_text("\n \n")
    extra = ["--tokenizer", str(tokenizer)] if command == "build-shards" else []
    for mix, message in ((f"ko={sources}/ko/*:1,en={tmp_path}/nothing/*:1", f"Error: --mix en: {tmp_path}/nothing/*: no files match"),
                         (f"ko={sources}/ko/*:1,en={tmp_path}/blank.txt:1", f"Error: --mix en: {tmp_path}/blank.txt: no text found"),
                         (f"ko={sources}/ko/*:1,all={sources}/*/*:1", f"Error: --mix: {sources}/ko/a.jsonl is in both ko and all")):
        result = CliRunner().invoke(main, [command, "--mix", mix, "--text-field", "content", "--out", str(tmp_path / "out"),
                                           "-q", *extra])
        assert result.exit_code == 1 and result.output.splitlines() == [message]
        assert not (tmp_path / "out").exists()


def test_sizes_are_characters_of_the_text_read(sources):
    """ko's size is the non-whitespace characters of its records' "content" (JSON left
    out; a Hangul syllable one, not three bytes), counted here from the files."""
    plan = measured(mix_spec(sources))
    records = [json.loads(line)["content"] for path in sorted((sources / "ko").iterdir())
               for line in path.read_text(encoding="utf-8").split("\n") if line]
    assert plan.sizes["ko"] == sum(len("".join(text.split())) for text in records)
    assert plan.documents["ko"] == len(records) == 240
    assert plan.sizes["ko"] < sum(len(text.encode("utf-8")) for text in records) / 2


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_temperature_limits_on_real_sources(sources, temperature):
    """T=1 reads every document exactly once; T=0 makes ko and en halves of the corpus
    (ko, the larger, thinned; en repeated), each within its tolerance of N/2."""
    spec = mix_spec(sources, "ko={root}/ko/*,en={root}/en/*", sampling_temperature=temperature)
    stats = ReadStats()
    documents = [tuple(d) for d in iter_documents(spec, stats)]
    plan = stats.mix
    natural = collections.Counter(tuple(d) for s in spec.mix for d in iter_documents(spec.source_spec(s)))
    total = plan.total
    if temperature == 1.0:
        assert collections.Counter(documents) == natural
        assert plan.kept_sizes == plan.sizes
        return
    for name in plan.sizes:
        assert abs(plan.kept_sizes[name] - total / 2) <= plan.tolerance(name), name
    assert plan.rates()["en"] > 1 > plan.rates()["ko"]
    # Another seed keeps other ko documents, as many characters within the tolerance.
    assert [tuple(d) for d in iter_documents(spec)] == documents  # the same seed, the same documents
    other = ReadStats()
    reseeded = {tuple(d) for d in iter_documents(replace(spec, mix_seed=1), other)}
    ko = {tuple(d) for d in iter_documents(spec.source_spec(spec.mix[0]))}
    assert set() < reseeded & ko < ko and set() < set(documents) & ko < ko  # both thin ko
    assert reseeded & ko != set(documents) & ko
    assert abs(other.mix.kept_sizes["ko"] - total / 2) <= other.mix.tolerance("ko")
