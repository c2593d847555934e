"""What the scatter tasks count over the rows they write (rows, tokens, the masked
positions by kind, random-next pairs, a histogram of lengths), and the driver's sum of
them: the figures the manifest's statistics and the build's warnings come from."""
from __future__ import annotations

import numpy as np


def empty_stats(max_seq_length: int) -> dict:
    return {
        "rows": 0,
        "tokens": 0,
        "masked_positions": 0,
        "masked_as_mask": 0,
        "masked_kept": 0,
        "masked_random": 0,
        "next_sentence_random": 0,
        "length_histogram": [0] * (max_seq_length + 1),
    }


def add_stats(stats: dict, rows, masked) -> None:
    lengths = rows.lengths
    stats["rows"] += rows.num_rows
    stats["tokens"] += int(lengths.sum())
    stats["masked_positions"] += len(masked.positions)
    stats["masked_as_mask"] += masked.num_masked
    stats["masked_kept"] += masked.num_kept
    stats["masked_random"] += masked.num_random
    stats["next_sentence_random"] += int(rows.next_sentence_label.sum())
    histogram = np.bincount(lengths, minlength=len(stats["length_histogram"]))
    stats["length_histogram"] = [a + int(b) for a, b in zip(stats["length_histogram"], histogram)]


def merge_stats(all_stats: list[dict]) -> dict:
    total = empty_stats(len(all_stats[0]["length_histogram"]) - 1) if all_stats else {}
    for stats in all_stats:
        for key, value in stats.items():
            if key == "length_histogram":
                total[key] = [a + b for a, b in zip(total[key], value)]
            else:
                total[key] += value
    return total
