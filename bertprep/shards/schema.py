"""The shard contract between bertprep and bertmodel (DESIGN.md, "Shards").

One row is one next-sentence-prediction instance, unpadded, with masking applied.
`bertmodel` imports these names; nothing else defines them.
"""
from __future__ import annotations

import pyarrow as pa

FORMAT_VERSION = 1

INPUT_IDS = "input_ids"
TOKEN_TYPE_IDS = "token_type_ids"
MASKED_LM_POSITIONS = "masked_lm_positions"
MASKED_LM_IDS = "masked_lm_ids"
NEXT_SENTENCE_LABEL = "next_sentence_label"
COLUMNS = (INPUT_IDS, TOKEN_TYPE_IDS, MASKED_LM_POSITIONS, MASKED_LM_IDS, NEXT_SENTENCE_LABEL)

# next_sentence_label follows the Hugging Face convention.
IS_NEXT = 0
IS_RANDOM = 1

UINT16_LIMIT = 65_536  # ids must be < this to fit list<uint16>


def token_type(vocab_size: int) -> pa.DataType:
    """uint16 ids while the vocabulary fits, int32 beyond (DESIGN.md)."""
    return pa.uint16() if vocab_size <= UINT16_LIMIT else pa.int32()


def shard_schema(vocab_size: int) -> pa.Schema:
    ids = token_type(vocab_size)
    return pa.schema(
        [
            pa.field(INPUT_IDS, pa.list_(ids)),
            pa.field(TOKEN_TYPE_IDS, pa.list_(pa.int8())),
            pa.field(MASKED_LM_POSITIONS, pa.list_(pa.uint16())),
            pa.field(MASKED_LM_IDS, pa.list_(ids)),
            pa.field(NEXT_SENTENCE_LABEL, pa.int8()),
        ]
    )


def features_dict(vocab_size: int) -> dict:
    """`dataset_info.json` features in the serialized form `datasets` writes, matching
    the Arrow types exactly (otherwise load_from_disk refuses the directory)."""
    ids = str(token_type(vocab_size))  # "uint16" or "int32"

    def seq(dtype: str) -> dict:
        return {"feature": {"dtype": dtype, "_type": "Value"}, "_type": "List"}

    return {
        INPUT_IDS: seq(ids),
        TOKEN_TYPE_IDS: seq("int8"),
        MASKED_LM_POSITIONS: seq("uint16"),
        MASKED_LM_IDS: seq(ids),
        NEXT_SENTENCE_LABEL: {"dtype": "int8", "_type": "Value"},
    }


def shard_name(index: int, count: int) -> str:
    return f"data-{index:05d}-of-{count:05d}.arrow"
