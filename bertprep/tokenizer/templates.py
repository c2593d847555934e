"""The special tokens a tokenizer wraps one sequence or a pair in, and their type ids.

Every family we read writes a pair as `prefix A middle B suffix` and one sequence as
`prefix A single_suffix`: BERT and DeBERTa `[CLS] A [SEP] B [SEP]`, RoBERTa and XLM-R
`<s> A </s></s> B </s>`, ModernBERT `[CLS] A [SEP] B [SEP]` with one token type. The
parts are read off the tokenizer's own post-processor (what transformers' fast
tokenizers apply), by encoding a probe pair and looking where the special tokens fall;
a post-processor that puts anything else around the texts (B before A, a special token
inside a text, no separator between A and B) is refused: shard rows and fine-tuning
features are built from these five parts.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bertprep.errors import BertprepError


@dataclass(frozen=True)
class Template:
    prefix: tuple[int, ...]  # before A ([CLS], <s>)
    middle: tuple[int, ...]  # between A and B ([SEP], </s></s>)
    suffix: tuple[int, ...]  # after B ([SEP], </s>)
    single_suffix: tuple[int, ...]  # after A when there is no B
    prefix_types: tuple[int, ...]
    middle_types: tuple[int, ...]
    suffix_types: tuple[int, ...]
    a_type: int = 0
    b_type: int = 1  # 0 for one-type families (RoBERTa, ModernBERT)

    @property
    def pair_specials(self) -> int:
        """Special tokens a pair adds (3 for BERT, 4 for RoBERTa)."""
        return len(self.prefix) + len(self.middle) + len(self.suffix)

    @property
    def single_specials(self) -> int:
        return len(self.prefix) + len(self.single_suffix)

    @property
    def one_type(self) -> bool:
        """True when every token of a pair has type 0 (RoBERTa, ModernBERT)."""
        return not any((*self.prefix_types, *self.middle_types, *self.suffix_types, self.a_type, self.b_type))

    def pair_ids(self, a, b) -> list[int]:
        return [*self.prefix, *a, *self.middle, *b, *self.suffix]

    def single_ids(self, a) -> list[int]:
        return [*self.prefix, *a, *self.single_suffix]

    def pair_type_ids(self, len_a: int, len_b: int) -> np.ndarray:
        return np.concatenate([np.asarray(self.prefix_types, np.int8), np.full(len_a, self.a_type, np.int8),
                               np.asarray(self.middle_types, np.int8), np.full(len_b, self.b_type, np.int8),
                               np.asarray(self.suffix_types, np.int8)])

    def as_dict(self) -> dict:
        """The manifest's record: the parts as token ids and type ids."""
        return {"prefix": list(self.prefix), "middle": list(self.middle), "suffix": list(self.suffix),
                "single_suffix": list(self.single_suffix), "a_type": self.a_type, "b_type": self.b_type,
                "prefix_types": list(self.prefix_types), "middle_types": list(self.middle_types),
                "suffix_types": list(self.suffix_types)}


def bert_template(cls: int, sep: int) -> Template:
    """`[CLS] A [SEP] B [SEP]`, types 0 0 0 1 1 (what build_tokenizer's post-processor says)."""
    return Template(prefix=(cls,), middle=(sep,), suffix=(sep,), single_suffix=(sep,), prefix_types=(0,),
                    middle_types=(0,), suffix_types=(1,), a_type=0, b_type=1)


def template_of(tokenizer, where: str) -> Template:
    """The parts `tokenizer`'s post-processor adds, read from a probe pair."""
    pair = tokenizer.encode("a", "b", add_special_tokens=True)
    single = tokenizer.encode("a", add_special_tokens=True)
    pair_parts = _parts(pair, where)
    single_parts = _parts(single, where)
    if len(pair_parts) != 3 or len(single_parts) != 2:
        raise BertprepError(f"{where}: the post-processor's pair template is not 'specials A specials B specials' "
                            f"(transformers' fast tokenizers and our rows need A before B, each in one piece)")
    (prefix, prefix_types, _), (middle, middle_types, a_type), (suffix, suffix_types, b_type) = pair_parts
    if not middle:
        raise BertprepError(f"{where}: the post-processor puts no special token between A and B; "
                            f"a pair needs a separator (a tokenizer.json with a BERT- or RoBERTa-style template)")
    if tuple(single_parts[0][0]) != tuple(prefix):
        raise BertprepError(f"{where}: one sequence and a pair start with different special tokens")
    return Template(prefix=tuple(prefix), middle=tuple(middle), suffix=tuple(suffix),
                    single_suffix=tuple(single_parts[1][0]), prefix_types=tuple(prefix_types),
                    middle_types=tuple(middle_types), suffix_types=tuple(suffix_types), a_type=a_type,
                    b_type=b_type)


def _parts(encoding, where: str) -> list[tuple[list[int], list[int], int]]:
    """Runs of special tokens between the texts: [(ids, type ids, type of the text just
    before the run)], the texts in order 0 then 1, each contiguous."""
    parts: list[tuple[list[int], list[int], int]] = [([], [], -1)]
    seen: list[int] = []
    for token_id, type_id, sequence in zip(encoding.ids, encoding.type_ids, encoding.sequence_ids):
        if sequence is None:
            parts[-1][0].append(token_id)
            parts[-1][1].append(type_id)
            continue
        if not seen or seen[-1] != sequence:
            if sequence in seen:
                raise BertprepError(f"{where}: the post-processor splits a text around special tokens")
            seen.append(sequence)
            text_type = type_id
            parts.append(([], [], text_type))
        elif type_id != parts[-1][2]:
            raise BertprepError(f"{where}: the post-processor gives one text two token types")
    if seen != sorted(seen):
        raise BertprepError(f"{where}: the post-processor puts B before A")
    return parts
