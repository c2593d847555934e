"""Data for training: pre-training shards (shards.py opens and checks a shard directory,
loader.py orders, batches and prefetches its rows) and fine-tuning readers."""
from bertmodel.data.loader import Batch, BatchLoader, SampleOrder, ShardDataset, eval_batches

__all__ = ["Batch", "BatchLoader", "SampleOrder", "ShardDataset", "eval_batches"]
