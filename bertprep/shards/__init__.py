"""The shard directory: the Arrow schema, the writer, the manifest, and reading it back
(inspect.py, plot.py).
"""
from bertprep.shards.inspect import decode_samples, format_report, measure, sample_rows
from bertprep.shards.manifest import build_manifest, pairing, write_dataset_files
from bertprep.shards.plot import masked_per_row_histogram, plot_shards
from bertprep.shards.writer import ArrowWriter

__all__ = ["ArrowWriter", "build_manifest", "decode_samples", "format_report", "masked_per_row_histogram", "measure",
           "pairing", "plot_shards", "sample_rows", "write_dataset_files"]
