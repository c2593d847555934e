"""The model's shape: one config dataclass per architecture, whose field comments are
the docs.

- `BertConfig`: field names are those of `transformers.BertConfig`, so `to_hf_dict()` is a
  plain dump and `from_dict()` reads a Hugging Face `config.json` back. Presets follow
  DESIGN.md (L layers / H hidden / A heads, intermediate 4H), as in Turc et al. 2019
  ("Well-Read Students Learn Better") for the small ones and Devlin et al. 2019 for base
  and large.
- `ModernBertConfig` (model/modernbert_config.py, re-exported here): the ModernBERT-style
  encoder's.
- `ElectraConfig`: an ELECTRA discriminator (Clark et al. 2020, arXiv 2003.10555) is the
  BERT architecture with word/position/type embeddings of width `embedding_size`,
  projected to H when that differs (`embeddings_project`), and its own heads
  (model/electra_heads.py); field names are those of `transformers.ElectraConfig`.
- `RobertaConfig` (Liu et al. 2019, arXiv 1907.11692) and `XLMRobertaConfig` (Conneau et
  al. 2020, arXiv 1911.02116; the same network, another vocabulary): the BERT encoder with
  positions counted from past the padding id, one token type, LayerNorm eps 1e-5 and its
  own heads (model/roberta.py, model/roberta_heads.py); field names are those of
  `transformers.RobertaConfig`.
`config_from_dict` reads any of them back, by `model_type`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from bertmodel.errors import BertmodelError
from bertmodel.model.modernbert_config import (FULL_ATTENTION, MODERNBERT_PRESETS,  # noqa: F401 (re-exported)
                                               SLIDING_ATTENTION, ModernBertConfig)

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
        if d.get("model_type", cls.model_type) != cls.model_type:
            raise BertmodelError(f"model_type {d.get('model_type')!r} is not {cls.model_type!r}")
        if d.get("position_embedding_type", "absolute") != "absolute":
            raise BertmodelError("only absolute position embeddings are supported")
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names}
        if kwargs.get("pad_token_id") is None:
            kwargs.pop("pad_token_id", None)
        if kwargs.get("hidden_act") in ("gelu_python",):  # the same exact-erf GELU in transformers
            kwargs["hidden_act"] = "gelu"
        return cls(**kwargs)

    architecture = "bert"  # the --architecture name (a class attribute: not a field, not in to_dict)
    model_type = "bert"  # config.json's model_type, which also picks the heads (model.HEADS)
    has_pair_head = True  # pre-training may add NSP/SOP (segment embeddings for it to read)

    @property
    def max_sequence_length(self) -> int:
        """The longest input, in tokens: one per position."""
        return self.max_position_embeddings

    @property
    def embedding_width(self) -> int:
        """Width of the embedding tables (and their LayerNorm): H for BERT."""
        return self.hidden_size

    def layer_weight_macs(self) -> int:
        """Multiply-adds per token of one layer's weight matrices (Q, K, V, output, MLP)."""
        return 4 * self.hidden_size ** 2 + 2 * self.hidden_size * self.intermediate_size

    def attended_pairs(self, layer: int, pairs: int, tokens: int) -> float:
        """Query-key pairs `layer` computes, given the batch's full-attention pairs: all."""
        return pairs

    def num_params(self, embeddings: bool = True) -> int:
        """Parameter count (tied decoder counted once); without embedding tables if asked."""
        H, I, L, V = self.hidden_size, self.intermediate_size, self.num_hidden_layers, self.vocab_size
        layer = 4 * (H * H + H) + 2 * (H * I) + I + H + 2 * 2 * H
        heads = (H * H + H) + 2 * H + V + (H * H + H) + (2 * H + 2)  # transform, LN, bias, pooler, NSP
        emb = (V + self.max_position_embeddings + self.type_vocab_size) * H + 2 * H
        return L * layer + heads + (emb if embeddings else 2 * H)


SUMMARY_ACTIVATIONS = ("gelu", "tanh", "linear", None)  # what transformers' get_activation gives, that we run


@dataclass
class ElectraConfig(BertConfig):
    """An ELECTRA discriminator (or generator) of the BERT architecture: `architecture` is
    "bert" (the same encoder, presets and options), `model_type` "electra" (its own heads
    and transformers classes). The summary_* fields are multiple choice's SequenceSummary."""

    embedding_size: int | None = None
    """Width E of the embedding tables; None: H. E != H adds `embeddings_project` (E -> H)
    after the embeddings' LayerNorm and dropout (ELECTRA-Small: E 128, H 256)."""
    classifier_dropout: float | None = None
    """Dropout of the classification and token heads; None: hidden_dropout_prob."""
    summary_type: str = "first"
    """What multiple choice reads: only "first" (the [CLS] state, transformers' default)."""
    summary_use_proj: bool = True
    """Multiple choice: a dense H -> H (`sequence_summary.summary`) before its activation."""
    summary_activation: str | None = "gelu"
    """Multiple choice: the activation after that dense ("gelu", "tanh", "linear" or None)."""
    summary_first_dropout: float = 0.0
    """Multiple choice: dropout before the dense."""
    summary_last_dropout: float = 0.1
    """Multiple choice: dropout after the activation, before the classifier."""

    model_type = "electra"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.embedding_size is None:
            self.embedding_size = self.hidden_size
        if int(self.embedding_size) <= 0:
            raise BertmodelError(f"ElectraConfig.embedding_size must be positive, got {self.embedding_size}")
        if self.summary_type != "first":
            raise BertmodelError(f"summary_type {self.summary_type!r} is not supported (only 'first')")
        if self.summary_activation not in SUMMARY_ACTIVATIONS:
            raise BertmodelError(f"summary_activation {self.summary_activation!r} is not supported (only gelu, "
                                 "tanh, linear or none)")
        for name in ("classifier_dropout", "summary_first_dropout", "summary_last_dropout"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value < 1.0:
                raise BertmodelError(f"ElectraConfig.{name} must be in [0, 1), got {value}")

    @property
    def embedding_width(self) -> int:
        return self.embedding_size

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "model_type": "electra"}

    def to_hf_dict(self) -> dict:
        """A `config.json` that `transformers.ElectraForPreTraining.from_pretrained` reads."""
        return {**super().to_hf_dict(), "architectures": ["ElectraForPreTraining"]}

    @classmethod
    def from_dict(cls, d: dict) -> "ElectraConfig":
        if d.get("summary_proj_to_labels") and d.get("summary_use_proj", True):
            raise BertmodelError("summary_proj_to_labels is not supported (multiple choice's summary projects to H)")
        return super().from_dict(d)

    def num_params(self, embeddings: bool = True) -> int:
        """Encoder parameters (no pooler, no head), with the projection where E != H."""
        H, E, I, L = self.hidden_size, self.embedding_size, self.intermediate_size, self.num_hidden_layers
        layer = 4 * (H * H + H) + 2 * (H * I) + I + H + 2 * 2 * H
        emb = (self.vocab_size + self.max_position_embeddings + self.type_vocab_size) * E if embeddings else 0
        return L * layer + emb + 2 * E + (E * H + H if E != H else 0)


MAX_LENGTH = 512  # tokens a fresh BERT or RoBERTa reads (DESIGN.md: learned positions, max 512)


@dataclass
class RobertaConfig(BertConfig):
    """RoBERTa: the BERT encoder whose position of a token is the count of non-padding
    tokens up to it plus `pad_token_id` (fairseq's make_positions; transformers'
    create_position_ids_from_input_ids), so the table holds pad + 1 rows below the first
    position and a padding token reads row `pad_token_id`; one token type (segment ids
    are not read); no pair head (MLM alone, Liu et al. 2019 §4.2)."""

    vocab_size: int = 50265
    """Rows of the word-embedding table (roberta-base's byte-level BPE: 50,265)."""
    max_position_embeddings: int = 514
    """Rows of the position table: the longest input + pad_token_id + 1 (roberta-base: 512 + 1 + 1)."""
    type_vocab_size: int = 1
    """One token type: segment ids are not read (a pair is `<s> A </s></s> B </s>`)."""
    layer_norm_eps: float = 1e-5
    """LayerNorm epsilon (fairseq's default, RoBERTa's)."""
    pad_token_id: int = 1
    """Id of the padding token, taken from the tokenizer; positions count from past it."""
    bos_token_id: int | None = 0
    """The sequence's first token (<s>, or [CLS] of a WordPiece vocabulary), for config.json."""
    eos_token_id: int | None = 2
    """The separator (</s>, or [SEP]), for config.json."""
    classifier_dropout: float | None = None
    """Dropout of the classification and token heads; None: hidden_dropout_prob."""

    architecture = "roberta"
    model_type = "roberta"
    hf_prefix = "Roberta"  # transformers' class names: RobertaModel, RobertaForMaskedLM, ...
    has_pair_head = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_position_embeddings <= self.pad_token_id + 1:
            raise BertmodelError(f"max_position_embeddings {self.max_position_embeddings} leaves no position past "
                                 f"pad_token_id {self.pad_token_id} (positions start at pad_token_id + 1)")
        if self.classifier_dropout is not None and not 0.0 <= self.classifier_dropout < 1.0:
            raise BertmodelError(f"RobertaConfig.classifier_dropout must be in [0, 1), got {self.classifier_dropout}")

    @property
    def max_sequence_length(self) -> int:
        """The longest input, in tokens: the positions past pad_token_id."""
        return self.max_position_embeddings - self.pad_token_id - 1

    @classmethod
    def preset(cls, name: str, **overrides) -> "RobertaConfig":
        """BERT's preset shapes; the position table sized for MAX_LENGTH tokens past the padding id."""
        overrides = {k: v for k, v in overrides.items() if v is not None}
        pad = overrides.get("pad_token_id", cls.pad_token_id)
        overrides.setdefault("max_position_embeddings", MAX_LENGTH + pad + 1)
        return super().preset(name, **overrides)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "model_type": self.model_type}

    def to_hf_dict(self) -> dict:
        """A `config.json` that `transformers.RobertaForMaskedLM.from_pretrained` reads."""
        return {**super().to_hf_dict(), "architectures": [f"{self.hf_prefix}ForMaskedLM"]}

    def num_params(self, embeddings: bool = True) -> int:
        """Parameters of the MLM model (tied decoder counted once; no pooler, no pair head)."""
        H, I, L, V = self.hidden_size, self.intermediate_size, self.num_hidden_layers, self.vocab_size
        layer = 4 * (H * H + H) + 2 * (H * I) + I + H + 2 * 2 * H
        head = (H * H + H) + 2 * H + V  # lm_head.dense, layer_norm, bias
        emb = (V + self.max_position_embeddings + self.type_vocab_size) * H + 2 * H
        return L * layer + head + (emb if embeddings else 2 * H)


@dataclass
class XLMRobertaConfig(RobertaConfig):
    """XLM-R: RoBERTa's network under transformers' XLMRoberta* class names (model_type
    "xlm-roberta"), read and written back as such; its vocabulary is its SentencePiece one."""

    vocab_size: int = 250002

    model_type = "xlm-roberta"
    hf_prefix = "XLMRoberta"


CONFIGS = {"bert": BertConfig, "modernbert": ModernBertConfig, "roberta": RobertaConfig}  # --architecture's
ARCHITECTURES = tuple(CONFIGS)
MODEL_TYPES = {"bert": BertConfig, "modernbert": ModernBertConfig, "electra": ElectraConfig,  # config.json's
               "roberta": RobertaConfig, "xlm-roberta": XLMRobertaConfig}


def config_from_dict(d: dict) -> BertConfig | ModernBertConfig | ElectraConfig | RobertaConfig:
    """A config of any model type (ours or a config.json), by its model_type (BERT's
    dicts, ours and older ones, carry none)."""
    kind = d.get("model_type", "bert")
    if kind not in MODEL_TYPES:
        raise BertmodelError(f"model_type {kind!r} is not supported; only {', '.join(MODEL_TYPES)} models are")
    return MODEL_TYPES[kind].from_dict(d)


def vocabulary_ids(tokenizer, architecture: str) -> dict:
    """The config fields a tokenizer (data.shards.TokenizerInfo) sets: its size and the
    ids of [PAD] (and for ModernBERT, whose config.json carries them, [CLS], [SEP], [MASK];
    for RoBERTa, whose positions start past it, also its bos and eos: [CLS] / <s>, [SEP] / </s>)."""
    ids = tokenizer.special_ids
    fields = {"vocab_size": tokenizer.vocab_size, "pad_token_id": ids.get("pad", 0)}
    if architecture == "modernbert":
        fields.update(cls_token_id=ids.get("cls"), sep_token_id=ids.get("sep"), mask_token_id=ids.get("mask"))
    if architecture == "roberta":
        fields.update(bos_token_id=ids.get("cls"), eos_token_id=ids.get("sep"))
    return fields


def preset_config(architecture: str, preset: str, **overrides) -> BertConfig | ModernBertConfig | RobertaConfig:
    """`--architecture` and `--preset` (with size overrides) -> a config."""
    if architecture not in CONFIGS:
        raise BertmodelError(f"unknown architecture {architecture!r}; choose {' or '.join(CONFIGS)}")
    return CONFIGS[architecture].preset(preset, **overrides)
