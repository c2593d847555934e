"""A model over a whole set in fixed order, in batches, dropout off: every pass of a model
over data that is not a training step (a fine-tuning task's evaluation, `evaluate`,
`predict`, the embedder's encoding) goes through forward_all, so one progress scope
(pass_progress) shows them all."""
from __future__ import annotations

import contextlib
import contextvars

import numpy as np
import torch

from bertprep.progress import progress_bar


# What a pass without its own on_batch shows: a bar named so, or nothing (None).
_PASS_PROGRESS: contextvars.ContextVar[str | None] = contextvars.ContextVar("pass_progress", default=None)


@contextlib.contextmanager
def pass_progress(enabled: bool, desc: str):
    """Within it, every pass of forward_all not given its own on_batch shows a progress
    bar named `desc` (batches; plain lines in a log). Every pass of a fine-tuned model over
    data goes through forward_all, so `evaluate` and `predict --file` show theirs with
    this one scope, whichever task's predict path runs."""
    token = _PASS_PROGRESS.set(desc if enabled else None)
    try:
        yield
    finally:
        _PASS_PROGRESS.reset(token)


@torch.no_grad()
def forward_all(model, count: int, batch_of, batch_size: int, device: torch.device, autocast, on_batch=None):
    """Run `model` over rows 0..count-1 in order, dropout off; yields (rows, output).
    on_batch(done, total), in batches: called with 0 first and after each batch is used
    (the trainer's progress bar; it may raise to abandon the pass); without one, the
    bar of an enclosing pass_progress, if any."""
    was_training = model.training
    model.eval()
    total = -(-count // batch_size)
    bar = None
    if on_batch is None and (desc := _PASS_PROGRESS.get()) is not None:
        bar = progress_bar(total=total, desc=desc, unit="batch")
        on_batch = lambda done, _total: bar.update(done - bar.n)  # noqa: E731
    try:
        if on_batch is not None:
            on_batch(0, total)
        for done, start in enumerate(range(0, count, batch_size), 1):
            rows = np.arange(start, min(start + batch_size, count))
            arrays = batch_of(rows)
            tensors = {k: torch.from_numpy(v).to(device) for k, v in arrays.items()}
            with autocast:
                out = model(**tensors)
            yield rows, out
            if on_batch is not None:
                on_batch(done, total)
    finally:
        model.train(was_training)
        if bar is not None:
            bar.close()
