"""Batches from shard directories: sample order, collation, a prefetching loader.

Sample order is a pure function of (seed, epoch, global index): global sample g is row
`permutation(seed, epoch=g // N)[g % N]` of the N rows of all shard directories, where
the permutation comes from `np.random.Generator(PCG64([seed, epoch]))`. A run's data
position is one integer, the cursor (global samples consumed so far), so resuming is a
seek, never a skip loop. Under DDP a step consumes `batch_size * world` consecutive
global samples and rank r takes every world-th of them, starting at r.

Collation is numpy over the memory-mapped Arrow buffers (see shards.py): each batch is
padded to its longest row rounded up to a multiple of 8 (tensor-core friendly, and few
distinct shapes for torch.compile), masked positions are padded to
max_predictions_per_seq with label -100. Python loops only over the distinct shard files
a batch touches, never over rows or tokens.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from bertmodel.errors import BertmodelError
from bertmodel.model.unpad import unpadded_extent
from bertmodel.model.heads import IGNORE_INDEX
from bertmodel.data.shards import LIST_COLUMNS, ShardDir
from bertprep.shards import schema

PAD_MULTIPLE = 8


class ShardDataset:
    """All rows of one or more shard directories, as one index space 0..rows-1."""

    def __init__(self, dirs: list[ShardDir]):
        if not dirs:
            raise BertmodelError("no shard directories given")
        first = dirs[0]
        for d in dirs[1:]:
            diff = first.tokenizer.same_as(d.tokenizer)
            if diff:
                raise BertmodelError(f"{d.path} uses another tokenizer than {first.path} ({diff})")
        self.dirs = dirs
        self.tokenizer = first.tokenizer
        self.files = [f for d in dirs for f in d.files]
        self.max_seq_length = max(d.max_seq_length for d in dirs)
        self.max_predictions = max(d.max_predictions_per_seq for d in dirs)
        self.pad_id = self.tokenizer.special_ids.get("pad", 0)
        # One entry per record batch of every file: first global row, file, batch in file.
        starts, file_of, batch_of, row = [], [], [], 0
        for fi, f in enumerate(self.files):
            for bi, n in enumerate(f.batch_rows):
                starts.append(row)
                file_of.append(fi)
                batch_of.append(bi)
                row += int(n)
        self.rows = row
        self.chunk_start = np.asarray(starts, np.int64)
        self.chunk_file = np.asarray(file_of, np.int64)
        self.chunk_batch = np.asarray(batch_of, np.int64)

    def __len__(self) -> int:
        return self.rows

    def collate(self, rows: np.ndarray, max_len: int | None = None) -> dict[str, np.ndarray]:
        """Padded int64 arrays for `rows` (global row indices): input_ids, token_type_ids,
        attention_mask (B, T); masked_lm_positions, masked_lm_labels (B, P);
        next_sentence_label (B,). T = longest row rounded up to 8 (at most max_len)."""
        rows = np.asarray(rows, np.int64)
        n, P = len(rows), self.max_predictions
        chunk = np.searchsorted(self.chunk_start, rows, side="right") - 1
        local = rows - self.chunk_start[chunk]
        file_of = self.chunk_file[chunk]
        start = {c: np.empty(n, np.int64) for c in LIST_COLUMNS}
        length = {c: np.empty(n, np.int64) for c in LIST_COLUMNS}
        label = np.empty(n, np.int64)
        groups = [(fi, np.flatnonzero(file_of == fi)) for fi in np.unique(file_of)]
        for fi, sel in groups:  # pass 1: where each row's lists start, and their lengths
            f, b, lo = self.files[fi], self.chunk_batch[chunk[sel]], local[sel]
            offsets = f.view[f.offset_dtype]
            for c in LIST_COLUMNS:
                at = f.offsets_at[c][b] + lo
                o = offsets[at].astype(np.int64)
                start[c][sel] = f.values_at[c][b] + o
                length[c][sel] = offsets[at + 1] - o
            label[sel] = f.view[np.dtype(np.int8)][f.labels_at[b] + lo]
        longest = int(length[schema.INPUT_IDS].max())
        most_pred = int(length[schema.MASKED_LM_POSITIONS].max())
        if most_pred > P:
            raise BertmodelError(f"a row has {most_pred} masked positions, more than "
                                 f"max_predictions_per_seq {P} ({self.dirs[0].path})")
        if max_len is not None and longest > max_len:
            raise BertmodelError(f"a row has {longest} tokens, more than the model's "
                                 f"{max_len} positions ({self.dirs[0].path})")
        T = -(-longest // PAD_MULTIPLE) * PAD_MULTIPLE
        if max_len is not None:
            T = min(T, max_len)
        out = {
            "input_ids": np.full((n, T), self.pad_id, np.int64),
            "token_type_ids": np.zeros((n, T), np.int64),
            "attention_mask": (np.arange(T) < length[schema.INPUT_IDS][:, None]).astype(np.int64),
            "masked_lm_positions": np.zeros((n, P), np.int64),
            "masked_lm_labels": np.full((n, P), IGNORE_INDEX, np.int64),
            "next_sentence_label": label,
        }
        targets = ((schema.INPUT_IDS, "input_ids", T), (schema.TOKEN_TYPE_IDS, "token_type_ids", T),
                   (schema.MASKED_LM_POSITIONS, "masked_lm_positions", P),
                   (schema.MASKED_LM_IDS, "masked_lm_labels", P))
        for fi, sel in groups:  # pass 2: gather the values, padded slots left at their fill
            f = self.files[fi]
            for column, name, width in targets:
                dtype = np.dtype(np.int8) if column == schema.TOKEN_TYPE_IDS else (
                    np.dtype(np.uint16) if column == schema.MASKED_LM_POSITIONS else f.id_dtype)
                valid = np.arange(width) < length[column][sel][:, None]  # (b, width)
                index = np.where(valid, start[column][sel][:, None] + np.arange(width), 0)
                block = out[name][sel]
                block[valid] = f.view[dtype][index[valid]]
                out[name][sel] = block
        return out


class SampleOrder:
    """Global sample index -> row: a fresh permutation of all rows per epoch."""

    def __init__(self, rows: int, seed: int, shuffle: bool = True):
        self.rows, self.seed, self.shuffle = rows, seed, shuffle
        self._epoch, self._perm = None, None

    def permutation(self, epoch: int) -> np.ndarray:
        if self._epoch != epoch:
            dtype = np.int32 if self.rows < 2**31 else np.int64  # 4 bytes per row
            perm = np.arange(self.rows, dtype=dtype)
            if self.shuffle:
                np.random.Generator(np.random.PCG64([self.seed, epoch])).shuffle(perm)
            self._epoch, self._perm = epoch, perm
        return self._perm

    def take(self, start: int, count: int) -> np.ndarray:
        """Rows of global samples start .. start+count-1 (they may span epochs)."""
        parts, g = [], start
        while g < start + count:
            epoch, i = divmod(g, self.rows)
            k = min(self.rows - i, start + count - g)
            parts.append(self.permutation(epoch)[i:i + k].astype(np.int64))
            g += k
        return np.concatenate(parts)

    def rank_rows(self, cursor: int, batch_size: int, rank: int, world: int) -> np.ndarray:
        return self.take(cursor, batch_size * world)[rank::world]


@dataclass
class Batch:
    tensors: dict[str, torch.Tensor]  # the model's keyword arguments, on the device
    cursor: int  # global samples consumed once this batch is done (what a checkpoint stores)
    tokens: int  # real (non-padding) tokens in this rank's batch
    attention_pairs: int  # each row's real tokens squared, summed: what unpadded attention computes
    shape: tuple[int, int, int]  # (B, T, P); P = 0 for batches without prediction slots


class BatchLoader:
    """Micro-batches for one rank from `cursor` (at optimizer step `step`) on, forever,
    collated on a background thread (numpy releases the GIL for the big copies) and
    pinned for a non-blocking copy on CUDA. Sample order does not depend on the thread:
    batch k is always global samples cursor + k*B*world ... (see SampleOrder), B the
    micro-batch of its step: `batch_size`, or `batch_sizes.micro_batch(step)` during a
    batch-size warmup (data/schedules.py), the step advancing every `grad_accum`
    micro-batches. `dataset` is anything with `collate(rows, max_len)` returning the
    model's arguments as numpy arrays (a task's train set: shards, encoded classification
    rows, QA windows), or `collate_at(rows, max_len, first_sample, rank, step)` for
    batches that depend on their position (dynamic masks)."""

    def __init__(self, dataset, order: SampleOrder, batch_size: int, cursor: int,
                 rank: int = 0, world: int = 1, device: torch.device | str = "cpu",
                 max_len: int | None = None, prefetch: int = 4, step: int = 0, grad_accum: int = 1,
                 batch_sizes=None):
        self.dataset, self.order = dataset, order
        self.batch_size, self.rank, self.world = batch_size, rank, world
        self.grad_accum, self.batch_sizes = grad_accum, batch_sizes
        self.device, self.max_len = torch.device(device), max_len
        self.pin = self.device.type == "cuda"
        self._queue: queue.Queue = queue.Queue(maxsize=prefetch)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, args=(cursor, step), daemon=True)
        self._thread.start()

    def _work(self, cursor: int, step: int) -> None:
        micro = 0
        try:
            while not self._stop.is_set():
                size = self.batch_size if self.batch_sizes is None else self.batch_sizes.micro_batch(step)
                rows = self.order.rank_rows(cursor, size, self.rank, self.world)
                if hasattr(self.dataset, "collate_at"):  # batches that depend on their position (dynamic masks)
                    arrays = self.dataset.collate_at(rows, self.max_len, cursor, self.rank, step)
                else:
                    arrays = self.dataset.collate(rows, self.max_len)
                cursor += size * self.world
                micro += 1
                if micro == self.grad_accum:
                    micro, step = 0, step + 1
                tensors = {k: torch.from_numpy(v) for k, v in arrays.items()}
                if self.pin:
                    tensors = {k: v.pin_memory() for k, v in tensors.items()}
                # (B, T), or (B, C, T) for multiple choice: B examples of C sequences each.
                B, T = arrays["input_ids"].shape[0], arrays["input_ids"].shape[-1]
                P = arrays["masked_lm_positions"].shape[1] if "masked_lm_positions" in arrays else 0
                # here, on the host: no device sync
                extent = unpadded_extent(arrays["attention_mask"].reshape(-1, T))
                for key in (k for k in arrays if k.endswith("_attention_mask")):  # a bi-encoder's passages
                    more = unpadded_extent(arrays[key])
                    extent = {name: extent[name] + more[name] for name in extent}
                item = Batch(tensors, cursor, extent["tokens"], extent["attention_pairs"], (B, T, P))
                while not self._stop.is_set():
                    try:
                        self._queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as exc:  # handed to the consumer, raised there
            self._queue.put(exc)

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        item.tensors = {k: v.to(self.device, non_blocking=self.pin) for k, v in item.tensors.items()}
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def eval_batches(dataset: ShardDataset, batch_size: int, rank: int = 0, world: int = 1,
                 max_batches: int | None = None, max_len: int | None = None) -> Iterator[dict]:
    """The first rows of `dataset` in file order, this rank's share (rows r::world),
    numpy batches; every rank gets the same number of batches."""
    per_step = batch_size * world
    steps = len(dataset) // per_step if len(dataset) >= per_step else 1
    if max_batches is not None:
        steps = min(steps, max_batches)
    for s in range(steps):
        rows = np.arange(s * per_step, min((s + 1) * per_step, len(dataset)))[rank::world]
        if len(rows):
            yield dataset.collate(rows, max_len)
