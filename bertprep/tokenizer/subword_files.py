"""The files of a trained byte-level BPE or Unigram tokenizer, as transformers reads them.

Special tokens: BERT's names, `[PAD] [UNK] [CLS] [SEP] [MASK]` (and the optional
`[unusedN]` slots after `[PAD]`), as ModernBERT-base names its own: `[PAD]` stays id 0
and the templates stay BERT's, `[CLS] A [SEP]` and `[CLS] A [SEP] B [SEP]` with type ids
0 for the first segment and 1 for the second (a one-type model ignores them), so
everything built for the WordPiece files (shards, masking, the NSP pairs) reads these
the same way. RoBERTa's `<s> </s> <pad> <unk> <mask>` would only rename them.

`[MASK]` strips the space before it (`lstrip`, as RoBERTa's and ModernBERT's `<mask>`/
`[MASK]`): in "the [MASK] of", the masked word's own leading space ("Ġcapital",
"▁capital") is what the mask stands for, not a separate space token.

tokenizer_config.json names `PreTrainedTokenizerFast`, which reads tokenizer.json whole
(normaliser, pre-tokenizer, model, post-processor, added tokens): so
`AutoTokenizer.from_pretrained(TOKDIR)` and `tokenizers.Tokenizer.from_file` give the
same ids (tests/test_train_tokenizer_kinds.py). No vocab.txt is written: Google's
tokenization.py would read one as WordPiece.
"""
from __future__ import annotations

import json

from tokenizers import AddedToken, Tokenizer, processors

from bertprep.storage import stores as storage
from bertprep.storage import write_bytes_atomic

MODEL_MAX_LENGTH = 512  # as the WordPiece files: BERT's learned positions
_ROLES = (("unk_token", "[UNK]"), ("sep_token", "[SEP]"), ("pad_token", "[PAD]"), ("cls_token", "[CLS]"),
          ("mask_token", "[MASK]"))


def _added(token: str) -> AddedToken:
    return AddedToken(token, special=True, normalized=False, lstrip=token == "[MASK]")


def add_specials_and_template(tokenizer: Tokenizer, specials: list[str]) -> None:
    """Register `specials` (every entry already in the model's vocabulary, [unusedN] too)
    as special added tokens and wrap sequences in BERT's single and pair templates."""
    token_to_id = tokenizer.get_vocab(with_added_tokens=False)
    missing = [token for token in specials if token not in token_to_id]
    if missing:
        raise RuntimeError(f"the trained vocabulary lacks {', '.join(missing)}")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", token_to_id["[CLS]"]), ("[SEP]", token_to_id["[SEP]"])],
    )
    tokenizer.add_special_tokens([_added(token) for token in specials])


def _described(token: str) -> dict:
    added = _added(token)
    return {"content": token, "lstrip": added.lstrip, "normalized": False, "rstrip": False,
            "single_word": False}


def write_files(tokenizer: Tokenizer, directory) -> list[str]:
    """tokenizer.json, tokenizer_config.json and special_tokens_map.json into `directory`
    (each written to a temporary name and renamed); returns the file names."""
    directory = storage.path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    specials = {role: _described(token) for role, token in _ROLES}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": MODEL_MAX_LENGTH,
              "clean_up_tokenization_spaces": False, **specials}
    contents = {
        "tokenizer.json": tokenizer.to_str(pretty=True) + "\n",
        "tokenizer_config.json": json.dumps(config, indent=2) + "\n",
        "special_tokens_map.json": json.dumps(specials, indent=2) + "\n",
    }
    for name, text in contents.items():
        write_bytes_atomic(directory / name, text.encode("utf-8"))
    return list(contents)
