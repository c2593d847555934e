"""fill-mask: the model's top guesses for each mask token in a sentence.

The tokenizer is the one stored with the model (RUN/hf/, a checkpoint's tokenizer/, or
an HF dir), and the mask is its own: `[MASK]` for BERT and ModernBERT, `<mask>` for
RoBERTa ("[MASK]" in the text is read as it too, whatever the tokenizer calls it).

A WordPiece tokenizer: tokenizer.json when present, else vocab.txt with BERT's basic +
WordPiece pipeline, lower-casing and stripping accents as the stored files say (a Korean
model's guesses are syllables, not the jamo accent stripping would make). The literal
"[MASK]" is split out of the text before encoding, so it becomes the mask id whatever
the tokenizer's added-token settings are. Any other kind (byte-level BPE, SentencePiece)
encodes the whole text with its own pipeline, as transformers' fill-mask pipeline does:
its mask token is an added token that takes the space before it (`lstrip`), so "is
<mask>." is the ids of "is", the mask and ".", not of "is " and ".".
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
    which reads the manifest and tokenizer_config.json before tokenizer.json); any other
    kind than WordPiece as its files say."""
    from bertprep.tokenizer import load_tokenizer as load_bert_tokenizer

    if tokenizer_info.kind != "wordpiece":
        return tokenizer_info.load().tokenizer
    files = tokenizer_info.files
    path = files["tokenizer.json"] if "tokenizer.json" in files else files["vocab.txt"]
    try:
        return load_bert_tokenizer(path, lowercase=tokenizer_info.lowercase,
                                   strip_accents=tokenizer_info.strips_accents).tokenizer
    except BertprepError as exc:
        raise BertmodelError(str(exc)) from None


def encode_with_masks(tokenizer, text: str, special: dict) -> list[int]:
    """WordPiece: [CLS], the pieces between the masks, a mask id for each, [SEP]."""
    pieces = text.split(MASK_TEXT)
    ids = [special["cls"]]
    for i, piece in enumerate(pieces):
        if piece.strip():
            ids.extend(tokenizer.encode(piece, add_special_tokens=False).ids)
        if i < len(pieces) - 1:
            ids.append(special["mask"])
    return ids + [special["sep"]]


def encode_text(tokenizer_info, tokenizer, text: str) -> list[int]:
    """The ids the model reads for `text` (module docstring), its masks the mask id."""
    if tokenizer_info.kind == "wordpiece":
        return encode_with_masks(tokenizer, text, tokenizer_info.special_ids)
    mask_text = tokenizer.id_to_token(tokenizer_info.special_ids["mask"])
    return tokenizer.encode(text.replace(MASK_TEXT, mask_text), add_special_tokens=True).ids


def mask_texts(tokenizer_info, tokenizer) -> tuple[str, ...]:
    """What a text may write for a mask: "[MASK]" and the tokenizer's own mask token."""
    return tuple(dict.fromkeys((MASK_TEXT, tokenizer.id_to_token(tokenizer_info.special_ids["mask"]))))


def fill_mask(model_path, text: str, top_k: int = 5, device: str = "cpu") -> list[list[Guess]]:
    """Top-k (token, probability) for each [MASK] in `text`, left to right."""
    return fill_masks(model_path, [text], top_k=top_k, device=device)[0]


@torch.no_grad()
def fill_masks(model_path, texts: list[str], top_k: int = 5, device: str = "cpu") -> list[list[list[Guess]]]:
    """`fill_mask` for several texts with the model loaded once (each text its own forward,
    so no padding enters the guesses)."""
    pre = load_pretrained(model_path, part="generator")  # of an ELECTRA run, its MLM model
    if pre.tokenizer is None:
        raise BertmodelError(f"{pre.source}: no tokenizer files (vocab.txt, tokenizer.json) stored with the model")
    mask_id = pre.tokenizer.require_mask(str(pre.source))
    tokenizer = load_tokenizer(pre.tokenizer)
    masks = mask_texts(pre.tokenizer, tokenizer)
    for text in texts:
        if not any(mask in text for mask in masks):
            raise BertmodelError(f"the text has no {' or '.join(masks)} to fill" + (f": {text!r}" if len(texts) > 1
                                                                                  else ""))
    encoded = [encode_text(pre.tokenizer, tokenizer, text) for text in texts]
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
    return [_guesses(model, tokenizer, ids, mask_id, top_k, device) for ids in encoded]


def _guesses(model, tokenizer, ids: list[int], mask_id: int, top_k: int, device) -> list[list[Guess]]:
    input_ids = torch.tensor([ids], device=device)
    positions = torch.tensor([[i for i, t in enumerate(ids) if t == mask_id]], device=device)
    out = model(input_ids, torch.zeros_like(input_ids), torch.ones_like(input_ids), positions)
    probs = out.mlm_logits[0].float().softmax(-1)  # (masks, V)
    top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    return [[Guess(tokenizer.id_to_token(int(i)), int(i), float(p)) for p, i in zip(ps, ix)]
            for ps, ix in zip(top.values, top.indices)]
