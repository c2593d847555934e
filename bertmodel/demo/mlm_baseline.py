"""What the demo's MLM accuracy and fill-mask guesses are read against: always guessing
the training shards' most frequent masked token, scored on the held-out positions the
pre-training run's evaluation scores (the first eval_batches x batch_size rows of the
held-out shards, in file order: data/loader.eval_batches on one process).

A tiny BERT after a few minutes on 1.3 MB has learnt mostly which words are frequent
where: its top guesses for any blank are "the", "a", "for". Its held-out accuracy beside
this guess says how much more than word frequencies it knows.
"""
from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa


@dataclass(frozen=True)
class FrequentGuess:
    token: str  # the training shards' most frequent masked token
    accuracy: float  # its share of the held-out positions
    positions: int  # held-out masked positions scored


def most_frequent_label(shard_dir: pathlib.Path) -> int:
    """The token id most often masked (masked_lm_ids) in a shard directory; ties: lowest id."""
    counts = np.zeros(0, np.int64)
    for path in sorted(shard_dir.glob("*.arrow")):
        table = pa.ipc.open_stream(pa.memory_map(str(path))).read_all()
        ids = table.column("masked_lm_ids").combine_chunks().values.to_numpy().astype(np.int64)
        found = np.bincount(ids)
        counts = np.pad(counts, (0, max(0, len(found) - len(counts))))
        counts[:len(found)] += found
    return int(counts.argmax())


def evaluated_labels(eval_dir: pathlib.Path, batch_size: int, eval_batches: int) -> np.ndarray:
    """The original ids at the held-out positions `pretrain --eval-batches` scores."""
    from bertmodel.data import ShardDataset, eval_batches as batches
    from bertmodel.data.shards import open_shard_dir
    from bertmodel.model.heads import IGNORE_INDEX

    data = ShardDataset([open_shard_dir(eval_dir, verify="size")])
    labels = [batch["masked_lm_labels"] for batch in batches(data, batch_size, max_batches=eval_batches)]
    flat = np.concatenate([b.ravel() for b in labels])
    return flat[flat != IGNORE_INDEX]


def frequent_guess(train_dir, eval_dir, batch_size: int, eval_batches: int) -> FrequentGuess:
    """Always guessing the training shards' most frequent masked token, on the evaluated
    held-out positions."""
    train_dir, eval_dir = pathlib.Path(train_dir), pathlib.Path(eval_dir)
    token_id = most_frequent_label(train_dir)
    labels = evaluated_labels(eval_dir, batch_size, eval_batches)
    vocab = (train_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    return FrequentGuess(vocab[token_id], float((labels == token_id).mean()), int(labels.size))


def last_evaluation(run) -> dict | None:
    """The run's last held-out evaluation (metrics.jsonl), or None."""
    path = pathlib.Path(run) / "metrics.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
    return next((r for r in reversed(records) if "eval_mlm_acc" in r), None)


def reading_guide(evaluation: dict | None, guess: FrequentGuess) -> str:
    """The line printed beside fill-mask's guesses."""
    against = f"always guessing {guess.token!r} scores {guess.accuracy:.3f} on the same {guess.positions:,} positions"
    if evaluation is None:
        return f"Read these guesses against word frequency: {against}."
    return (f"Read these guesses against the held-out MLM accuracy, {evaluation['eval_mlm_acc']:.3f} at step "
            f"{evaluation['step']:,}, where {against}: a model this small and this briefly trained knows mostly "
            "which words are frequent where, so function words top every blank; the distance between the two "
            "figures is what it knows beyond them.")
