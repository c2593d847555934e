"""One build-shards run: its config, the plan of partitions, the tasks an executor
runs, the checks before publishing, progress and input fingerprints.
"""
from bertprep.builder.checks import contradicted_options
from bertprep.builder.config import MAX_SEQ_LENGTH, SHARD_ROWS, BuildConfig, default_shard_rows
from bertprep.builder.fingerprints import input_fingerprints
from bertprep.builder.partitions import text_bytes
from bertprep.builder.plan import cut_while_reading, merge_read_stats, plan_partitions, read_partition
from bertprep.builder.run import build_shards, staging_path
from bertprep.builder.tasks import vocabulary_for_masking

__all__ = ["MAX_SEQ_LENGTH", "SHARD_ROWS", "BuildConfig", "build_shards", "contradicted_options", "cut_while_reading",
           "default_shard_rows", "input_fingerprints", "merge_read_stats", "plan_partitions", "read_partition", "staging_path", "text_bytes",
           "vocabulary_for_masking"]
