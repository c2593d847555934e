"""fill-mask: the model's top guesses for each [MASK] in a sentence.

The tokenizer is the one stored with the model (RUN/hf/, a checkpoint's tokenizer/, or
an HF dir): tokenizer.json when present, else vocab.txt with BERT's basic + WordPiece
pipeline, lower-casing and stripping accents as the stored files say (a Korean model's
guesses are syllables, not the jamo accent stripping would make). The literal "[MASK]"
is split out of the text before encoding, so it becomes the mask id whatever the
tokenizer's added-token settings are.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from bertmodel.errors import BertmodelError
from bertprep.errors import BertprepError
from bertmodel.hf import load_into, load_pretrained
from bertmodel.model import head_class

MASK_TEXT = "[MASK]"


@dataclass
class Guess:
    token: str
    id: int
    prob: float


def load_tokenizer(tokenizer_info):
    """The model's tokenizer (a `tokenizers.Tokenizer`) as bertprep's loader builds it,
    with the casing and accent stripping the model was trained with (tokenizer_info's,
    which reads the manifest and tokenizer_config.json before tokenizer.json)."""
    from bertprep.tokenizer import load_tokenizer as load_bert_tokenizer

    files = tokenizer_info.files
    path = files["tokenizer.json"] if "tokenizer.json" in files else files["vocab.txt"]
    try:
        return load_bert_tokenizer(path, lowercase=tokenizer_info.lowercase,
                                   strip_accents=tokenizer_info.strips_accents).tokenizer
    except BertprepError as exc:
        raise BertmodelError(str(exc)) from None


def encode_with_masks(tokenizer, text: str, special: dict) -> list[int]:
    pieces = text.split(MASK_TEXT)
    ids = [special["cls"]]
    for i, piece in enumerate(pieces):
        if piece.strip():
            ids.extend(tokenizer.encode(piece, add_special_tokens=False).ids)
        if i < len(pieces) - 1:
            ids.append(special["mask"])
    return ids + [special["sep"]]


def fill_mask(model_path, text: str, top_k: int = 5, device: str = "cpu") -> list[list[Guess]]:
    """Top-k (token, probability) for each [MASK] in `text`, left to right."""
    return fill_masks(model_path, [text], top_k=top_k, device=device)[0]


@torch.no_grad()
def fill_masks(model_path, texts: list[str], top_k: int = 5, device: str = "cpu") -> list[list[list[Guess]]]:
    """`fill_mask` for several texts with the model loaded once (each text its own forward,
    so no padding enters the guesses)."""
    for text in texts:
        if MASK_TEXT not in text:
            raise BertmodelError(f"the text has no {MASK_TEXT} to fill" + (f": {text!r}" if len(texts) > 1 else ""))
    pre = load_pretrained(model_path, part="generator")  # of an ELECTRA run, its MLM model
    if pre.tokenizer is None:
        raise BertmodelError(f"{pre.source}: no tokenizer files (vocab.txt) stored with the model")
    special = pre.tokenizer.special_ids
    missing = [k for k in ("cls", "sep", "mask") if k not in special]
    if missing:
        raise BertmodelError(f"{pre.source}: the tokenizer lacks {', '.join(missing)}")
    tokenizer = load_tokenizer(pre.tokenizer)
    encoded = [encode_with_masks(tokenizer, text, special) for text in texts]
    for ids in encoded:
        if len(ids) > pre.config.max_sequence_length:
            raise BertmodelError(f"the text is {len(ids)} tokens, more than the model's "
                                 f"{pre.config.max_sequence_length} positions")
    # The MLM head of the model's type (BERT's with the pair head, which reads any BERT's
    # MLM weights; ModernBERT's MLM model; ELECTRA's generator).
    model = head_class(pre.config, "pretraining" if pre.config.model_type == "bert" else "mlm")(pre.config)
    # Guesses from an untrained MLM head would look like answers (a ModernBERT
    # discriminator's encoder and head.* load, its decoder bias would not).
    heads = ("cls.predictions.", "decoder.", "head.", "generator_", "lm_head.")
    absent = sorted(k for k in model.state_dict() if k.startswith(heads) and k not in pre.state_dict)
    if absent:
        raise BertmodelError(f"{pre.source}: has no MLM head ({pre.architecture}; missing {', '.join(absent[:3])}); "
                             "fill-mask needs a model pre-trained with masked LM")
    load_into(model, pre)
    model.to(device).eval()
    return [_guesses(model, tokenizer, ids, special["mask"], top_k, device) for ids in encoded]


def _guesses(model, tokenizer, ids: list[int], mask_id: int, top_k: int, device) -> list[list[Guess]]:
    input_ids = torch.tensor([ids], device=device)
    positions = torch.tensor([[i for i, t in enumerate(ids) if t == mask_id]], device=device)
    out = model(input_ids, torch.zeros_like(input_ids), torch.ones_like(input_ids), positions)
    probs = out.mlm_logits[0].float().softmax(-1)  # (masks, V)
    top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    return [[Guess(tokenizer.id_to_token(int(i)), int(i), float(p)) for p, i in zip(ps, ix)]
            for ps, ix in zip(top.values, top.indices)]
