"""`BertConfig`: the model's shape, one dataclass whose field comments are the docs.

Field names are those of `transformers.BertConfig`, so `to_hf_dict()` is a plain dump
and `from_hf_dict()` reads a Hugging Face `config.json` back. Presets follow DESIGN.md
(L layers / H hidden / A heads, intermediate 4H), as in Turc et al. 2019 ("Well-Read
Students Learn Better") for the small ones and Devlin et al. 2019 for base and large.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from bertmodel.errors import BertmodelError

# name: (num_hidden_layers, hidden_size, num_attention_heads)
PRESETS: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}


@dataclass
class BertConfig:
    vocab_size: int = 30522
    """Rows of the word-embedding table; must equal the shards' tokenizer vocab size."""
    hidden_size: int = 768
    """Width H of every token representation."""
    num_hidden_layers: int = 12
    """Transformer layers L."""
    num_attention_heads: int = 12
    """Attention heads A; H must be divisible by A."""
    intermediate_size: int = 3072
    """Width of each layer's feed-forward block (4H in every preset)."""
    hidden_act: str = "gelu"
    """Only "gelu" (the exact erf form, which is what transformers calls "gelu")."""
    hidden_dropout_prob: float = 0.1
    """Dropout after embeddings, attention output and feed-forward output."""
    attention_probs_dropout_prob: float = 0.1
    """Dropout on attention probabilities (model/dropout.py: attention)."""
    max_position_embeddings: int = 512
    """Learned absolute positions; no batch may be longer than this."""
    type_vocab_size: int = 2
    """Segment (token type) ids: 0 for [CLS] A [SEP], 1 for B [SEP]."""
    initializer_range: float = 0.02
    """Standard deviation of the normal init of every Linear and Embedding weight."""
    layer_norm_eps: float = 1e-12
    """LayerNorm epsilon (post-LN, as in the original BERT)."""
    pad_token_id: int = 0
    """Id of [PAD], taken from the tokenizer; its embedding row starts at zero."""

    def __post_init__(self) -> None:
        positive = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size", "max_position_embeddings", "type_vocab_size")
        for name in positive:
            if int(getattr(self, name)) <= 0:
                raise BertmodelError(f"BertConfig.{name} must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_attention_heads:
            raise BertmodelError(
                f"hidden size {self.hidden_size} is not divisible by {self.num_attention_heads} heads")
        if self.hidden_act != "gelu":
            raise BertmodelError(f"hidden_act {self.hidden_act!r} is not supported (only exact 'gelu')")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise BertmodelError(f"BertConfig.{name} must be in [0, 1), got {getattr(self, name)}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise BertmodelError(f"pad_token_id {self.pad_token_id} is outside the vocabulary")


    @classmethod
    def preset(cls, name: str, **overrides) -> "BertConfig":
        """A named preset with optional overrides (None values are ignored).

        Overriding hidden_size without intermediate_size keeps intermediate at 4H."""
        if name not in PRESETS:
            raise BertmodelError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        layers, hidden, heads = PRESETS[name]
        overrides = {k: v for k, v in overrides.items() if v is not None}
        hidden = overrides.pop("hidden_size", hidden)
        fields = dict(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                      intermediate_size=4 * hidden)
        fields.update(overrides)
        return cls(**fields)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_hf_dict(self) -> dict:
        """A `config.json` that `transformers.BertForPreTraining.from_pretrained` reads."""
        return {
            "architectures": ["BertForPreTraining"],
            "model_type": "bert",
            **self.to_dict(),
            "position_embedding_type": "absolute",
            "tie_word_embeddings": True,
            "dtype": "float32",
        }

    @classmethod
    def from_dict(cls, d: dict) -> "BertConfig":
        """Read our own dict or a Hugging Face config.json (unknown keys ignored)."""
        if d.get("model_type", "bert") != "bert":
            raise BertmodelError(f"model_type {d.get('model_type')!r} is not 'bert'")
        if d.get("position_embedding_type", "absolute") != "absolute":
            raise BertmodelError("only absolute position embeddings are supported")
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names}
        if kwargs.get("pad_token_id") is None:
            kwargs.pop("pad_token_id", None)
        if kwargs.get("hidden_act") in ("gelu_python",):  # the same exact-erf GELU in transformers
            kwargs["hidden_act"] = "gelu"
        return cls(**kwargs)

    def num_params(self, embeddings: bool = True) -> int:
        """Parameter count (tied decoder counted once); without embedding tables if asked."""
        H, I, L, V = self.hidden_size, self.intermediate_size, self.num_hidden_layers, self.vocab_size
        layer = 4 * (H * H + H) + 2 * (H * I) + I + H + 2 * 2 * H
        heads = (H * H + H) + 2 * H + V + (H * H + H) + (2 * H + 2)  # transform, LN, bias, pooler, NSP
        emb = (V + self.max_position_embeddings + self.type_vocab_size) * H + 2 * H
        return L * layer + heads + (emb if embeddings else 2 * H)
