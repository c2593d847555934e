"""Data for training: pre-training shards (shards.py opens and checks a shard directory,
loader.py orders, batches and prefetches its rows) and fine-tuning readers (squad.py,
qa_features.py, ...).

The loader's names are imported on first use, so the fine-tuning readers, which need
only numpy and tokenizers, can be imported without loading torch.
"""
_LOADER_NAMES = ("Batch", "BatchLoader", "SampleOrder", "ShardDataset", "eval_batches")

__all__ = list(_LOADER_NAMES)


def __getattr__(name):
    if name in _LOADER_NAMES:
        from bertmodel.data import loader

        return getattr(loader, name)
    raise AttributeError(f"module 'bertmodel.data' has no attribute {name!r}")
