"""One build-shards run: its config, the plan of partitions, the tasks an executor
runs, the checks before publishing, progress and input fingerprints.
"""
from bertprep.build.checks import contradicted_options
from bertprep.build.config import MAX_SEQ_LENGTH, SHARD_ROWS, BuildConfig, default_shard_rows
from bertprep.build.fingerprints import input_fingerprints
from bertprep.build.partitions import text_bytes
from bertprep.build.plan import cut_while_reading, merge_read_stats, plan_partitions, read_partition
from bertprep.build.run import build_shards, staging_path
from bertprep.build.tasks import vocabulary_for_masking

__all__ = ["MAX_SEQ_LENGTH", "SHARD_ROWS", "BuildConfig", "build_shards", "contradicted_options", "cut_while_reading",
           "default_shard_rows", "input_fingerprints", "merge_read_stats", "plan_partitions", "read_partition", "staging_path", "text_bytes",
           "vocabulary_for_masking"]
