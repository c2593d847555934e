"""Several sources in one corpus, sampled to asked shares: `--mix` and `--sampling-temperature`.

A mix names its sources, `NAME=PATH[:WEIGHT]` each (PATH a file, directory or glob), and
says what share of the corpus each is to be: the weights, normalised, or, with
`--sampling-temperature T` and no weights, shares proportional to size**T (T=1 keeps the
natural shares, T=0 makes them equal; XLM-R samples languages with T=0.3, mmBERT anneals
0.7 -> 0.5 -> 0.3). Size is counted in characters of text, whitespace left out: counted
after reading (JSON and markup do not count), comparable across scripts (a Hangul or Han
character is one, not three UTF-8 bytes), and the same whatever the sentence splitter
does.

The corpus keeps its natural total: source s, of n_s characters, is sampled at the rate
r_s = share_s x N / n_s, where N = sum(n_s). Its documents are then read ceil(r_s)
times, as copies 0, 1, ...: every full copy keeps every document (epochs over a small
source, as XLM-R and mmBERT repeat their small languages), and the last, fractional one
(or the only one, when r_s < 1) keeps the documents whose priority, a 64-bit hash of the
mix seed, the source name and the document's text, is below a threshold. Measuring a
source sums its documents' sizes in 1,024 buckets of priority, so the threshold is put
where the kept size reaches the fraction: the copy keeps its fraction of the source's
characters to within the documents of one bucket (`MixPlan.tolerance`, recorded), not
merely on average. The choice is a function of the document alone, never of its
position, partition or worker, so train-tokenizer and build-shards keep the same
documents, and a build's bytes do not depend on --workers.

A mix is part of the `CorpusSpec` (spec.py), so both commands read it the same way and
record it; this module holds the arithmetic and the choice, and imports no reader.
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field

from bertprep.errors import BertprepError

SIZE_UNIT = "characters"  # what a source's size counts: non-whitespace characters of its documents
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
_KEY_DROP = str.maketrans("", "", "-\u00ad")  # hyphens: prose re-joins some words only in build-shards


@dataclass(frozen=True)
class MixSource:
    """One source of a mix: a name (it names the source in the manifest and messages),
    a file, directory or glob, and its weight (None: from --sampling-temperature)."""

    name: str
    path: str
    weight: float | None = None


def parse_mix(text: str) -> tuple[MixSource, ...]:
    """ "ko=petitions/*:0.7,en=wiki/*:0.3" -> its sources. A weight is the part after the
    last ":" when that is a number; a tail with a "/" is part of the path (s3://...)."""
    sources = []
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            raise BertprepError(f"--mix: empty entry in {text!r}; expected NAME=PATH[:WEIGHT],...")
        name, equals, rest = entry.partition("=")
        name, rest = name.strip(), rest.strip()
        if not equals or not rest:
            raise BertprepError(f"--mix: {entry!r} is not NAME=PATH[:WEIGHT] (e.g. ko=petitions/*:0.7)")
        if not _NAME.match(name):
            raise BertprepError(f"--mix: source name {name!r} must be letters, digits, '_', '.' or '-'")
        path, weight = rest, None
        head, colon, tail = rest.rpartition(":")
        if colon and "/" not in tail:
            try:
                weight = float(tail)
            except ValueError:
                raise BertprepError(f"--mix {name}: weight {tail!r} is not a number") from None
            path = head.strip()
            if not path:
                raise BertprepError(f"--mix {name}: no path before the weight")
        sources.append(MixSource(name, path, weight))
    return tuple(sources)


def check_mix(sources: tuple[MixSource, ...], temperature: float | None) -> None:
    """One-line errors for a mix that cannot be sampled as given."""
    if temperature is not None:
        if not sources:
            raise BertprepError("--sampling-temperature only applies with --mix")
        if not (math.isfinite(temperature) and temperature >= 0):
            raise BertprepError(f"--sampling-temperature: {temperature} must be a number >= 0")
    seen: set[str] = set()
    for source in sources:
        if source.name in seen:
            raise BertprepError(f"--mix: source {source.name!r} is named twice")
        seen.add(source.name)
        if source.weight is not None and not (math.isfinite(source.weight) and source.weight > 0):
            raise BertprepError(f"--mix {source.name}: weight {source.weight:g} must be a number > 0")
    weighted = [s.name for s in sources if s.weight is not None]
    if weighted and temperature is not None:
        raise BertprepError("--mix: give weights or --sampling-temperature, not both "
                            f"(weighted: {', '.join(weighted)})")
    if weighted and len(weighted) != len(sources):
        unweighted = ", ".join(s.name for s in sources if s.weight is None)
        raise BertprepError(f"--mix: {unweighted} without a weight; give every source one, or none "
                            "(then --sampling-temperature decides, 1 by default)")


def size_of(document: list[str]) -> int:
    """A document's size in SIZE_UNIT: its characters, whitespace left out."""
    return sum(len(word) for sentence in document for word in sentence.split())


BUCKET_BITS = 10  # 1,024 buckets of priority per source
_BUCKET_SHIFT = 64 - BUCKET_BITS
KEEP_ALL = 1 << 64  # the threshold of a full copy: every priority is below it


def keep_fractions(rate: float) -> list[float]:
    """The share of documents each copy keeps: [1, 1, 0.27] for a rate of 2.27, [0.4]
    for 0.4. A fraction within 1e-9 of a whole copy is taken as one (floating-point
    shares that should be exact)."""
    whole = math.floor(rate + 1e-9)
    fraction = rate - whole
    fractions = [1.0] * whole
    if fraction > 1e-9:
        fractions.append(fraction)
    return fractions or [0.0]


def document_priority(document: list[str], source: str, seed: int) -> int:
    """A 64-bit hash of the mix seed, the source and the document's text (whitespace and
    hyphens left out, so both commands' readings of the same document agree)."""
    key = "".join("".join(document).split()).translate(_KEY_DROP)
    digest = hashlib.blake2b(f"{seed}\x1f{source}\x1f".encode() + key.encode("utf-8", "surrogatepass"),
                             digest_size=8)
    return int.from_bytes(digest.digest(), "little")


def keeps(document: list[str], source: str, threshold: int, seed: int) -> bool:
    """Whether a copy of the source with this threshold (MixPlan.copies) keeps the document."""
    return threshold >= KEEP_ALL or document_priority(document, source, seed) < threshold


def bucket_of(priority: int) -> int:
    return priority >> _BUCKET_SHIFT


def threshold_for(fraction: float, histogram: list[int]) -> tuple[int, int]:
    """(threshold, tolerance): the priority below which the documents hold `fraction` of
    the size in `histogram` (sizes per bucket of priority), interpolated inside the bucket
    where it falls, and that bucket's size, the most the kept size can miss by."""
    if fraction >= 1.0:
        return KEEP_ALL, 0
    target = fraction * sum(histogram)
    below = 0
    for bucket, size in enumerate(histogram):
        if size and below + size > target:
            inside = int((target - below) / size * (1 << _BUCKET_SHIFT))
            return (bucket << _BUCKET_SHIFT) + min(inside, (1 << _BUCKET_SHIFT) - 1), size
        below += size
    return KEEP_ALL, 0


@dataclass
class MixPlan:
    """The mix of one corpus once its sources are measured: shares, rates, copies; and,
    once read, what was kept (`add_kept`)."""

    sources: tuple[MixSource, ...]
    temperature: float | None
    seed: int
    sizes: dict[str, int]  # SIZE_UNIT per source
    documents: dict[str, int]  # documents per source
    files: dict[str, int]  # input files per source
    histograms: dict[str, list[int]]  # per source, SIZE_UNIT per bucket of priority
    kept_sizes: dict[str, int] = field(default_factory=dict)
    kept_documents: dict[str, int] = field(default_factory=dict)

    def __post_init__(self):
        for source in self.sources:
            if self.sizes.get(source.name, 0) <= 0:
                raise BertprepError(f"--mix {source.name}: {source.path}: no text found")

    @property
    def total(self) -> int:
        return sum(self.sizes[s.name] for s in self.sources)

    def target_shares(self) -> dict[str, float]:
        """The share of the corpus each source is to be (weights, or size**T)."""
        if all(s.weight is not None for s in self.sources):
            raw = {s.name: s.weight for s in self.sources}
        else:
            exponent = 1.0 if self.temperature is None else self.temperature
            largest = max(self.sizes.values())
            raw = {s.name: (self.sizes[s.name] / largest) ** exponent for s in self.sources}
        total = math.fsum(raw.values())
        return {name: value / total for name, value in raw.items()}

    def rates(self) -> dict[str, float]:
        """Copies of each source's documents, on average: share x N / n."""
        shares, total = self.target_shares(), self.total
        return {s.name: shares[s.name] * total / self.sizes[s.name] for s in self.sources}

    def keep_fractions(self, name: str) -> list[float]:
        return keep_fractions(self.rates()[name])

    def copies(self, name: str) -> list[tuple[float, int]]:
        """(share of documents kept, threshold) of each copy of the source."""
        return [(fraction, threshold_for(fraction, self.histograms[name])[0]) for fraction in self.keep_fractions(name)]

    def tolerance(self, name: str) -> int:
        """The most the kept size of the source can differ from share x N, in SIZE_UNIT."""
        return threshold_for(self.keep_fractions(name)[-1], self.histograms[name])[1]

    def add_kept(self, name: str, size: int, documents: int) -> None:
        self.kept_sizes[name] = self.kept_sizes.get(name, 0) + size
        self.kept_documents[name] = self.kept_documents.get(name, 0) + documents

    def achieved_shares(self) -> dict[str, float]:
        total = sum(self.kept_sizes.values())
        return {s.name: self.kept_sizes.get(s.name, 0) / total if total else 0.0 for s in self.sources}

    def record(self) -> dict:
        """What a manifest records of the mix."""
        shares, rates, achieved = self.target_shares(), self.rates(), self.achieved_shares()
        total = self.total
        return {
            "size_unit": SIZE_UNIT,
            "temperature": self.temperature,
            "seed": self.seed,
            SIZE_UNIT: total,
            f"sampled_{SIZE_UNIT}": sum(self.kept_sizes.values()),
            "sources": [{
                "name": s.name, "path": s.path, "weight": s.weight, "files": self.files.get(s.name, 0),
                SIZE_UNIT: self.sizes[s.name], "documents": self.documents.get(s.name, 0),
                "natural_share": self.sizes[s.name] / total, "target_share": shares[s.name],
                "rate": rates[s.name], "copies": len(self.keep_fractions(s.name)),
                f"target_{SIZE_UNIT}": shares[s.name] * total, f"tolerance_{SIZE_UNIT}": self.tolerance(s.name),
                f"sampled_{SIZE_UNIT}": self.kept_sizes.get(s.name, 0),
                "sampled_documents": self.kept_documents.get(s.name, 0),
                "achieved_share": achieved[s.name],
            } for s in self.sources],
        }


def mix_summary(record: dict) -> str:
    """One line from a manifest's mix record: "mix of 4.1 M characters: ko 0.700 (asked
    0.700, natural 0.550, x1.27), en 0.300 (asked 0.300, natural 0.450, x0.67)"."""
    parts = [f"{s['name']} {s['achieved_share']:.3f} (asked {s['target_share']:.3f}, natural "
             f"{s['natural_share']:.3f}, x{s['rate']:.2f})" for s in record["sources"]]
    how = "" if record["temperature"] is None else f", temperature {record['temperature']:g}"
    return f"mix of {record[f'sampled_{SIZE_UNIT}']:,} {SIZE_UNIT}{how}: " + ", ".join(parts)
