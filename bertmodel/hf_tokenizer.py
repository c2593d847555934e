"""The tokenizer's half of an export (hf.py's export_hf): its files copied (a bare
vocab.txt given a tokenizer.json and the configs AutoTokenizer needs to lower-case),
tokenizer_config.json's model_max_length (the length a fine-tuned model's run read) and,
for a model with one token type, its model_input_names, and config.json's special token
ids from our vocabulary."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from bertmodel.data.shards import TokenizerInfo
from bertmodel.model.config import ModernBertConfig, RobertaConfig
from bertprep.tokenizer import SPECIAL_TOKENS_MAP
from bertprep.tokenizer import load_tokenizer as load_bert_tokenizer


def reading_length(task: dict | None) -> int | None:
    """The tokens per input a fine-tuning run read: an embed run's passage length
    (sentence-transformers has one length for every text), any other fine-tuning run's
    --max-seq-length (its task record's options); None for a pre-training run or a model
    with no task record."""
    task = task or {}
    embed = task.get("sentence_transformers") or {}
    length = embed.get("max_seq_length") or (task.get("options") or {}).get("max_seq_length")
    return int(length) if length else None


def write_tokenizer(out_dir: Path, tokenizer: TokenizerInfo | None, max_len: int,
                    read_length: int | None = None, input_names: list[str] | None = None) -> None:
    """Copy the tokenizer files; add tokenizer_config.json / special_tokens_map.json when
    the source has only a vocab.txt (AutoTokenizer needs the former to lower-case). A
    tokenizer of another kind (byte-level BPE, SentencePiece) brings its own, as bertprep
    saves them (data/tokenizer_info.py): tokenizer.json and a tokenizer_config.json that
    names its special tokens and its class; BERT's names are never added to it.

    model_max_length is where transformers' `truncation=True`, its token-classification
    pipeline and sentence-transformers' CrossEncoder cut an input. A fine-tuned model's
    is `read_length`, the length its run trained and evaluated at, so they read what the
    run read and score as it did. Any other model's is its `max_len` positions (or the
    tokenizer's own claim within BERT's 512, and never more than the model's positions:
    ModernBERT's tokenizer claims 8,192 whatever model it is saved beside, and an input
    cut there would overrun a shorter one's): a pre-trained encoder is a starting point,
    and a fine-tuning through transformers caps its --max_seq_length at this value
    (run_glue.py's min(max_seq_length, model_max_length)), so a pre-training run's 128
    must not stop a fine-tuning at 512 (which trains the later positions, as BERT's
    second phase does).

    input_names: what the tokenizer's calls return (model_input_names), where the model
    reads less than the tokenizer would give: a RoBERTa model has one token type, and a
    WordPiece tokenizer's pair type ids of 1 would not fit its table in transformers."""
    if tokenizer is None:
        return
    for name, path in tokenizer.files.items():
        shutil.copyfile(path, out_dir / name)
    lower = True if tokenizer.lowercase is None else bool(tokenizer.lowercase)
    strip = lower if tokenizer.strip_accents is None else bool(tokenizer.strip_accents)
    if "tokenizer.json" not in tokenizer.files and "vocab.txt" in tokenizer.files:
        # transformers' AutoTokenizer builds some models' tokenizers (ModernBERT's among
        # them) from tokenizer.json alone, whatever tokenizer_config.json's class says:
        # from a bare vocab.txt it fails ("Couldn't instantiate the backend tokenizer").
        # Write the pipeline bertprep's loader builds from it, with the model's casing.
        loaded = load_bert_tokenizer(tokenizer.files["vocab.txt"], lowercase=lower, strip_accents=strip)
        (out_dir / "tokenizer.json").write_text(loaded.tokenizer.to_str(pretty=True) + "\n", encoding="utf-8")
    if "tokenizer_config.json" in tokenizer.files:
        config = json.loads((out_dir / "tokenizer_config.json").read_text())
        claimed, claimed_names = config.get("model_max_length"), config.get("model_input_names")
        if read_length is not None:
            config["model_max_length"] = read_length
        elif max_len > 512 and (claimed or 0) < max_len:
            # bertprep writes BERT's 512 there; the tokenizer of a longer model must not cut at it
            config["model_max_length"] = max_len
        elif claimed is not None and claimed > max_len:
            config["model_max_length"] = max_len
        if input_names is not None:
            config["model_input_names"] = list(input_names)
        if (config.get("model_max_length"), config.get("model_input_names")) != (claimed, claimed_names):
            # else the source's file stays as it was copied
            (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    else:
        # strip_accents written out: transformers' BertTokenizer rebuilds its normalizer
        # from these two, and a lower-cased model trained with accents kept (non-Latin
        # text) must not have them stripped.
        config = {"tokenizer_class": "BertTokenizer", "do_lower_case": lower, "strip_accents": strip,
                  "model_max_length": read_length or max_len, **SPECIAL_TOKENS_MAP,
                  **({"model_input_names": list(input_names)} if input_names is not None else {})}
        (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    if "special_tokens_map.json" not in tokenizer.files and tokenizer.kind == "wordpiece":
        (out_dir / "special_tokens_map.json").write_text(json.dumps(SPECIAL_TOKENS_MAP, indent=2))


def special_ids(tokenizer: TokenizerInfo, config) -> dict:
    """config.json's special token ids from our vocabulary (ModernBERT's defaults are its
    own BPE vocabulary's, which would point fill-mask and the pipelines at other tokens;
    RoBERTa's are roberta-base's <s>, </s> and <pad>)."""
    ids = tokenizer.special_ids
    out = {"pad_token_id": ids.get("pad", config.pad_token_id)}
    if isinstance(config, ModernBertConfig):
        for name, key in (("cls", "cls_token_id"), ("sep", "sep_token_id"), ("cls", "bos_token_id"),
                          ("sep", "eos_token_id"), ("mask", "mask_token_id")):
            if name in ids:
                out[key] = ids[name]
    if isinstance(config, RobertaConfig):
        out.update({key: ids[name] for name, key in (("cls", "bos_token_id"), ("sep", "eos_token_id")) if name in ids})
    return out


def input_names(config) -> list[str] | None:
    """model_input_names for an export's tokenizer_config.json where the model reads no
    segment ids (a RoBERTa of one token type, as roberta-base's tokenizer says); None: as
    the tokenizer's files have it."""
    if isinstance(config, RobertaConfig) and config.type_vocab_size == 1:
        return ["input_ids", "attention_mask"]
    return None
