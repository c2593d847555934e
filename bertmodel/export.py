"""Hugging Face export and import: our state dict already uses transformers' names.

`export_hf` writes what `BertForPreTraining.save_pretrained` + a tokenizer's
`save_pretrained` would: config.json, model.safetensors (every tensor except the two
tied decoder entries, cls.predictions.decoder.weight/bias, exactly the 30 + 16 L keys
transformers writes; metadata {"format": "pt"}) and the tokenizer files, so
`BertForPreTraining.from_pretrained(dir)` loads with no missing or unexpected keys and
`AutoTokenizer.from_pretrained(dir)` works.

`load_pretrained(path)` reads a model from a RUN dir (its latest checkpoint), a
checkpoint dir, or a Hugging Face dir (model.safetensors or pytorch_model.bin, old
gamma/beta LayerNorm names accepted) for --init-from, fill-mask and export-hf.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from bertmodel.checkpoint import is_disk_full, latest_checkpoint, load_checkpoint, unwrap_state_dict
from bertmodel.config import BertConfig
from bertmodel.errors import BertmodelError
from bertmodel.data.shards import TOKENIZER_FILES, TokenizerInfo, tokenizer_info

TIED_KEYS = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")
TIED_SOURCES = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
                "cls.predictions.decoder.bias": "cls.predictions.bias"}
SPECIAL_TOKENS_MAP = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                      "cls_token": "[CLS]", "mask_token": "[MASK]"}


@dataclass
class Pretrained:
    config: BertConfig
    state_dict: dict  # complete for our BertForPreTraining (tied keys filled in)
    tokenizer: TokenizerInfo | None
    source: Path
    step: int | None = None  # our checkpoints only


def hf_tensors(state_dict: dict) -> dict[str, torch.Tensor]:
    """The tensors save_pretrained writes: tied decoder entries dropped, fp32, contiguous."""
    sd = unwrap_state_dict(state_dict)
    return {k: v.detach().to("cpu", torch.float32).contiguous().clone()
            for k, v in sd.items() if k not in TIED_KEYS}


def write_tokenizer(out_dir: Path, tokenizer: TokenizerInfo | None, max_len: int) -> None:
    """Copy the tokenizer files; add tokenizer_config.json / special_tokens_map.json when
    the source has only a vocab.txt (AutoTokenizer needs the former to lower-case)."""
    if tokenizer is None:
        return
    for name, path in tokenizer.files.items():
        shutil.copyfile(path, out_dir / name)
    if "tokenizer_config.json" not in tokenizer.files:
        lower = True if tokenizer.lowercase is None else bool(tokenizer.lowercase)
        config = {"tokenizer_class": "BertTokenizer", "do_lower_case": lower, "model_max_length": max_len,
                  **SPECIAL_TOKENS_MAP}
        (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    if "special_tokens_map.json" not in tokenizer.files:
        (out_dir / "special_tokens_map.json").write_text(json.dumps(SPECIAL_TOKENS_MAP, indent=2))


def export_hf(source, out_dir, tokenizer: TokenizerInfo | None = None, config: BertConfig | None = None) -> Path:
    """Write a Hugging Face BertForPreTraining directory, atomically (tmp dir + rename).

    source: a checkpoint dict (ours), a RUN or checkpoint dir, an HF dir, or a model.
    tokenizer / config: needed only when `source` does not carry them."""
    out_dir = Path(out_dir)
    if isinstance(source, torch.nn.Module):
        state_dict, config = source.state_dict(), config or source.config
    elif isinstance(source, dict):
        state_dict = source["model"]
        config = config or BertConfig.from_dict(source["config"])
    else:
        pre = load_pretrained(source)
        state_dict, config, tokenizer = pre.state_dict, pre.config, tokenizer or pre.tokenizer
    if config is None:
        raise BertmodelError("export_hf needs a config for a bare state dict")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        tmp.mkdir()
        save_file(hf_tensors(state_dict), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        hf_config = config.to_hf_dict()
        if tokenizer is not None:
            hf_config["pad_token_id"] = tokenizer.special_ids.get("pad", config.pad_token_id)
        (tmp / "config.json").write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
        write_tokenizer(tmp, tokenizer, config.max_position_embeddings)
    except BaseException as exc:
        full = is_disk_full(out_dir.parent, exc)
        shutil.rmtree(tmp, ignore_errors=True)  # never leave half an export behind
        if full:
            kept = "the previous export is unchanged" if out_dir.exists() else "nothing was exported"
            raise BertmodelError(f"{out_dir}: disk full while exporting; {kept}") from None
        raise
    old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
    if out_dir.exists():
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    if old.exists():
        shutil.rmtree(old)
    return out_dir


def _hf_state_dict(directory: Path) -> dict:
    if (directory / "model.safetensors").is_file():
        sd = load_file(str(directory / "model.safetensors"))
    elif (directory / "pytorch_model.bin").is_file():
        sd = torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
    else:
        raise BertmodelError(f"{directory}: no model.safetensors or pytorch_model.bin")
    out = {}
    for k, v in sd.items():
        k = k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        if k.startswith(("embeddings.", "encoder.", "pooler.")):  # a bare BertModel's names
            k = "bert." + k
        if k.endswith(("position_ids", "token_type_ids")) and "embeddings." in k:
            continue  # buffers older transformers persisted
        out[k] = v
    return out


def complete_state_dict(state_dict: dict) -> dict:
    """Fill in the tied decoder entries save_pretrained leaves out."""
    sd = dict(state_dict)
    for key, src in TIED_SOURCES.items():
        if key not in sd and src in sd:
            sd[key] = sd[src]
    return sd


def load_pretrained(path) -> Pretrained:
    """Read a RUN dir, a checkpoint dir (ours) or a Hugging Face BertForPreTraining dir."""
    path = Path(path)
    if not path.exists():
        raise BertmodelError(f"{path}: no such model directory")
    if (path / "checkpoints").is_dir() and not (path / "config.json").is_file():
        ckpt = latest_checkpoint(path)
        if ckpt is None:
            if (path / "hf" / "config.json").is_file():
                return load_pretrained(path / "hf")
            raise BertmodelError(f"{path}: a run directory without a complete checkpoint")
        path = ckpt
    if (path / "state.pt").is_file():
        state = load_checkpoint(path)
        tok_dir = path / "tokenizer"
        tok = tokenizer_info(tok_dir) if (tok_dir / "vocab.txt").is_file() else None
        return Pretrained(BertConfig.from_dict(state["config"]), complete_state_dict(state["model"]),
                          tok, path, step=int(state["step"]))
    if (path / "config.json").is_file():
        config = json.loads((path / "config.json").read_text())
        archs = config.get("architectures") or ["BertForPreTraining"]
        if config.get("model_type") != "bert":
            raise BertmodelError(f"{path}/config.json: model_type {config.get('model_type')!r} is not 'bert'")
        cfg = BertConfig.from_dict(config)
        sd = complete_state_dict(_hf_state_dict(path))
        tok = tokenizer_info(path) if any((path / n).is_file() for n in TOKENIZER_FILES[:1]) else None
        if "BertForPreTraining" not in archs and "cls.seq_relationship.weight" not in sd:
            raise BertmodelError(f"{path}: a {archs[0]} checkpoint has no pre-training heads")
        return Pretrained(cfg, sd, tok, path)
    raise BertmodelError(f"{path}: not a run, checkpoint or Hugging Face model directory")


def load_into(model, pretrained: Pretrained) -> None:
    """Load weights into our model, naming missing or unexpected keys in one line."""
    try:
        missing, unexpected = model.load_state_dict(pretrained.state_dict, strict=False)
    except RuntimeError as exc:  # shape mismatches
        detail = next((line.strip() for line in str(exc).splitlines() if "size mismatch" in line), str(exc))
        raise BertmodelError(f"{pretrained.source}: weights do not fit the model ({detail})") from None
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}")
        if unexpected:
            parts.append(f"unexpected {', '.join(unexpected[:4])}{' ...' if len(unexpected) > 4 else ''}")
        raise BertmodelError(f"{pretrained.source}: weights do not fit the model ({'; '.join(parts)})")
    model.tie_weights()
