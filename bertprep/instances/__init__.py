"""The reference algorithm, with no I/O: a tokenized partition into NSP/SOP pairs or
FULL-SENTENCES rows (pairs.py, full_sentences.py), token rows (rows.py), masking
(masking.py), row statistics and pair quality.
"""
from bertprep.instances.full_sentences import build_full_rows, document_starts, pack_full_sentences
from bertprep.instances.masking import (MaskingConfig, Vocabulary, apply_masking, cap_warnings, counts_to_predict,
                                        mask_padded, num_to_predict)
from bertprep.instances.pair_quality import (LABEL_NAMES, PairFigures, degenerate_pairs_warning, figures, likely_cause,
                                             rows_label)
from bertprep.instances.pairs import build_instances, build_pairs, build_sop_pairs, truncated_lengths
from bertprep.instances.partition import PAIRINGS, PairConfig, TokenizedPartition
from bertprep.instances.row_stats import add_stats, empty_stats, merge_stats
from bertprep.instances.rows import Rows, build_rows, ragged_arange

__all__ = ["LABEL_NAMES", "MaskingConfig", "PAIRINGS", "PairConfig", "PairFigures", "Rows", "TokenizedPartition",
           "Vocabulary", "add_stats", "apply_masking", "build_full_rows", "build_instances", "build_pairs",
           "build_rows", "build_sop_pairs", "cap_warnings", "counts_to_predict", "degenerate_pairs_warning",
           "document_starts", "empty_stats", "figures", "likely_cause", "mask_padded", "merge_stats",
           "num_to_predict", "pack_full_sentences", "ragged_arange", "rows_label", "truncated_lengths"]
