"""Small corpora and a matching vocabulary that tests write themselves, and a checker
of the shard contract (DESIGN.md) used by several test files."""
from __future__ import annotations

import json
import pathlib
import random

import numpy as np
import pyarrow as pa

from shared_data import SHARED_DATA  # noqa: F401  (re-exported for the shard tests)

WORDS = (
    "the a river mountain city people walked quickly slowly across bridge over old new "
    "green red house garden children played music evening morning light rain wind "
    "fisherman boat harbour market bread cheese baker opened shop street lamp night "
    "teacher school lesson book wrote letter friend travelled north south station train"
).split()
PIECES = ["##s", "##ed", "##ing", "##ly", "##er"]
SPECIALS = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def write_vocab(path: pathlib.Path) -> pathlib.Path:
    tokens = SPECIALS + sorted(set(WORDS)) + [".", ","] + PIECES
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return path


def write_corpus(path: pathlib.Path, documents: int = 60, seed: int = 0) -> pathlib.Path:
    """Documents of 1-12 sentences of 3-25 words, a blank line between documents."""
    rng = random.Random(seed)
    lines = []
    for _ in range(documents):
        for _ in range(rng.randint(1, 12)):
            words = [rng.choice(WORDS) + rng.choice(["", "", "", "s", "ing"]) for _ in range(rng.randint(3, 25))]
            lines.append(" ".join(words).capitalize() + ".")
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def read_rows(out: pathlib.Path) -> list[dict]:
    manifest = json.loads((out / "manifest.json").read_text())
    rows = []
    for shard in manifest["shards"]:
        table = pa.ipc.open_stream(pa.memory_map(str(out / shard["name"]))).read_all()
        rows.extend(table.to_pylist())
    return rows


def check_shard_dir(out: pathlib.Path, max_seq_length: int = 128, max_predictions: int = 20, prob: float = 0.15) -> dict:
    """Assert every row invariant of the contract; return the manifest."""
    manifest = json.loads((out / "manifest.json").read_text())
    vocab = (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
    ids = {w: i for i, w in enumerate(vocab)}
    cls, sep, mask = ids["[CLS]"], ids["[SEP]"], ids["[MASK]"]
    specials = {i for w, i in ids.items() if w.startswith("[") and w.endswith("]")}
    rows = read_rows(out)
    assert len(rows) == manifest["totals"]["rows"] > 0
    for row in rows:
        tokens, types = row["input_ids"], row["token_type_ids"]
        positions, labels = row["masked_lm_positions"], row["masked_lm_ids"]
        n = len(tokens)
        assert n <= max_seq_length and tokens[0] == cls and tokens[-1] == sep
        boundary = types.index(1)
        assert types == [0] * boundary + [1] * (n - boundary)
        assert tokens[boundary - 1] == sep and boundary >= 3 and n - boundary >= 2
        assert positions == sorted(set(positions))
        assert len(positions) == min(max_predictions, max(1, round(n * prob)), n - 3)
        assert not set(positions) & {0, boundary - 1, n - 1}
        for p, label in zip(positions, labels):
            assert label not in (cls, sep, mask)
            shown = tokens[p]
            assert shown in (mask, label) or shown not in specials
        assert row["next_sentence_label"] in (0, 1)
    return manifest


def shard_bytes(out: pathlib.Path) -> dict[str, bytes]:
    """Every file of a finished build, by name."""
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


def np_equal(a, b) -> bool:
    return np.array_equal(np.asarray(a), np.asarray(b))
