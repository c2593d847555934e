"""The model's shape: one config dataclass per architecture, whose field comments are
the docs.

- `BertConfig`: field names are those of `transformers.BertConfig`, so `to_hf_dict()` is a
  plain dump and `from_dict()` reads a Hugging Face `config.json` back. Presets follow
  DESIGN.md (L layers / H hidden / A heads, intermediate 4H), as in Turc et al. 2019
  ("Well-Read Students Learn Better") for the small ones and Devlin et al. 2019 for base
  and large.
- `ModernBertConfig` (the ModernBERT-style encoder, model/modernbert.py): field names are
  those of `transformers.ModernBertConfig`; base and large are ModernBERT's own shapes
  (Warner et al. 2024, "Smarter, Better, Faster, Longer", arXiv 2412.13663, table 3).
- `ElectraConfig`: an ELECTRA discriminator (Clark et al. 2020, arXiv 2003.10555) is the
  BERT architecture with word/position/type embeddings of width `embedding_size`,
  projected to H when that differs (`embeddings_project`), and its own heads
  (model/electra_heads.py); field names are those of `transformers.ElectraConfig`.
`config_from_dict` reads any of them back, by `model_type`.
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


# name: (num_hidden_layers, hidden_size, num_attention_heads, intermediate_size). base and
# large are ModernBERT's; the small ones keep its design (GLU intermediate 1.5H, a layer
# count of 3k + 1 so the last layer, like base's and large's, is a global one).
MODERNBERT_PRESETS: dict[str, tuple[int, int, int, int]] = {
    "tiny": (4, 128, 2, 192),
    "mini": (4, 256, 4, 384),
    "small": (7, 512, 8, 768),
    "medium": (10, 512, 8, 768),
    "base": (22, 768, 12, 1152),
    "large": (28, 1024, 16, 2624),
}

FULL_ATTENTION, SLIDING_ATTENTION = "full_attention", "sliding_attention"  # transformers' layer_types


@dataclass
class ModernBertConfig:
    vocab_size: int = 30522
    """Rows of the word-embedding table; must equal the shards' tokenizer vocab size."""
    hidden_size: int = 768
    """Width H of every token representation."""
    intermediate_size: int = 1152
    """Width I of the gated MLP: `mlp.Wi` projects to 2I (the GELU input and its gate), `mlp.Wo` back."""
    num_hidden_layers: int = 22
    """Transformer layers L."""
    num_attention_heads: int = 12
    """Attention heads A; H must be divisible by A."""
    hidden_activation: str = "gelu"
    """The GLU's activation: only "gelu" (exact erf; transformers' "gelu")."""
    max_position_embeddings: int = 8192
    """Longest sequence. RoPE has no position table, so this is a limit, not a size."""
    initializer_range: float = 0.02
    """Standard deviation of the truncated normal init of the input-side matrices."""
    initializer_cutoff_factor: float = 2.0
    """The init's normal is truncated at this many standard deviations."""
    norm_eps: float = 1e-5
    """LayerNorm epsilon (pre-norm)."""
    norm_bias: bool = False
    """Bias in the LayerNorms (ModernBERT: none)."""
    attention_bias: bool = False
    """Bias in attn.Wqkv and attn.Wo."""
    mlp_bias: bool = False
    """Bias in mlp.Wi and mlp.Wo."""
    decoder_bias: bool = True
    """The MLM decoder's output bias."""
    classifier_bias: bool = False
    """Bias in the heads' `head.dense`."""
    attention_dropout: float = 0.0
    """Dropout on attention probabilities and after attn.Wo."""
    embedding_dropout: float = 0.0
    """Dropout after the embedding norm."""
    mlp_dropout: float = 0.0
    """Dropout between the GLU and mlp.Wo."""
    classifier_dropout: float = 0.0
    """Dropout before a fine-tuning head's classifier."""
    classifier_pooling: str = "cls"
    """What classification and multiple choice read: "cls" (the first token) or "mean" (of the real tokens)."""
    layer_types: list[str] | None = None
    """Per layer, "full_attention" (global) or "sliding_attention" (local); None: global every
    `global_attn_every_n_layers`-th layer starting with the first."""
    global_attn_every_n_layers: int = 3
    """Used only to fill `layer_types` when it is not given."""
    local_attention: int = 128
    """The local window, whole: a token attends to those at most local_attention // 2 away."""
    global_rope_theta: float = 160_000.0
    """RoPE base of the global layers (ModernBERT: 160,000 for its 8,192-token context)."""
    local_rope_theta: float = 10_000.0
    """RoPE base of the local layers."""
    pad_token_id: int = 0
    """Id of [PAD], taken from the tokenizer; its embedding row starts at zero."""
    cls_token_id: int | None = None
    """[CLS] (bos) of our vocabulary, carried into config.json (transformers' default is ModernBERT's BPE's)."""
    sep_token_id: int | None = None
    """[SEP] (eos) of our vocabulary."""
    mask_token_id: int | None = None
    """[MASK] of our vocabulary."""

    architecture = "modernbert"  # the --architecture name (a class attribute: not a field)
    model_type = "modernbert"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings", "global_attn_every_n_layers", "local_attention"):
            if int(getattr(self, name)) <= 0:
                raise BertmodelError(f"ModernBertConfig.{name} must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_attention_heads or (self.hidden_size // self.num_attention_heads) % 2:
            raise BertmodelError(f"hidden size {self.hidden_size} over {self.num_attention_heads} heads must give an "
                                 "even head size (RoPE rotates pairs of dimensions)")
        if self.hidden_activation != "gelu":
            raise BertmodelError(f"hidden_activation {self.hidden_activation!r} is not supported (only 'gelu')")
        for name in ("attention_dropout", "embedding_dropout", "mlp_dropout", "classifier_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise BertmodelError(f"ModernBertConfig.{name} must be in [0, 1), got {getattr(self, name)}")
        if self.classifier_pooling not in ("cls", "mean"):
            raise BertmodelError(f"classifier_pooling must be cls or mean, got {self.classifier_pooling!r}")
        if self.layer_types is None:
            self.layer_types = [FULL_ATTENTION if i % self.global_attn_every_n_layers == 0 else SLIDING_ATTENTION
                                for i in range(self.num_hidden_layers)]
        self.layer_types = list(self.layer_types)
        if len(self.layer_types) != self.num_hidden_layers or set(self.layer_types) - {FULL_ATTENTION,
                                                                                        SLIDING_ATTENTION}:
            raise BertmodelError(f"layer_types must name {FULL_ATTENTION} or {SLIDING_ATTENTION} for each of the "
                                 f"{self.num_hidden_layers} layers")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise BertmodelError(f"pad_token_id {self.pad_token_id} is outside the vocabulary")

    @property
    def window(self) -> int:
        """How far a local layer's token sees on each side (transformers' sliding_window)."""
        return self.local_attention // 2

    def is_local(self, layer: int) -> bool:
        return self.layer_types[layer] == SLIDING_ATTENTION

    @classmethod
    def preset(cls, name: str, **overrides) -> "ModernBertConfig":
        """A named preset with optional overrides (None values are ignored). Overriding
        hidden_size without intermediate_size keeps the GLU at 1.5H."""
        if name not in MODERNBERT_PRESETS:
            raise BertmodelError(f"unknown preset {name!r}; choose one of {', '.join(MODERNBERT_PRESETS)}")
        layers, hidden, heads, intermediate = MODERNBERT_PRESETS[name]
        overrides = {k: v for k, v in overrides.items() if v is not None}
        if "hidden_size" in overrides and "intermediate_size" not in overrides:
            intermediate = overrides["hidden_size"] * 3 // 2
        fields = dict(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                      intermediate_size=intermediate)
        fields.update(overrides)
        return cls(**fields)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "model_type": "modernbert"}

    def to_hf_dict(self) -> dict:
        """A `config.json` that `transformers.ModernBertForMaskedLM.from_pretrained` reads."""
        d = self.to_dict()
        for ours in ("global_rope_theta", "local_rope_theta", "mask_token_id"):
            d.pop(ours)
        return {
            "architectures": ["ModernBertForMaskedLM"],
            **d,
            "rope_parameters": {FULL_ATTENTION: {"rope_type": "default", "rope_theta": self.global_rope_theta},
                                SLIDING_ATTENTION: {"rope_type": "default", "rope_theta": self.local_rope_theta}},
            "bos_token_id": self.cls_token_id, "eos_token_id": self.sep_token_id,
            "mask_token_id": self.mask_token_id,  # not a transformers field: kept as an attribute, for users
            "sparse_prediction": False, "tie_word_embeddings": True, "dtype": "float32",
        }

    @classmethod
    def from_dict(cls, d: dict) -> "ModernBertConfig":
        """Read our own dict or a Hugging Face config.json (unknown keys ignored)."""
        if d.get("model_type", "modernbert") != "modernbert":
            raise BertmodelError(f"model_type {d.get('model_type')!r} is not 'modernbert'")
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names and v is not None}
        for layer_type, ours in ((FULL_ATTENTION, "global_rope_theta"), (SLIDING_ATTENTION, "local_rope_theta")):
            rope = (d.get("rope_parameters") or {}).get(layer_type) or {}
            if rope.get("rope_type", "default") != "default":
                raise BertmodelError(f"rope_type {rope['rope_type']!r} is not supported (only 'default')")
            if "rope_theta" in rope:
                kwargs[ours] = float(rope["rope_theta"])
        if kwargs.get("hidden_activation") == "gelu_python":
            kwargs["hidden_activation"] = "gelu"
        return cls(**kwargs)

    def layer_weight_macs(self) -> int:
        """Multiply-adds per token of one layer's weight matrices (Wqkv, Wo, the GLU's Wi and Wo)."""
        return 4 * self.hidden_size ** 2 + 3 * self.hidden_size * self.intermediate_size

    def attended_pairs(self, layer: int, pairs: int, tokens: int) -> float:
        """Query-key pairs `layer` computes, given the batch's full-attention pairs: a local
        layer's queries read at most 2 x window + 1 keys each (the band; the blocked kernel
        computes up to twice that, counted as the useful work)."""
        return min(pairs, tokens * (2 * self.window + 1)) if self.is_local(layer) else pairs


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


CONFIGS = {"bert": BertConfig, "modernbert": ModernBertConfig}  # --architecture -> its config
ARCHITECTURES = tuple(CONFIGS)
MODEL_TYPES = {"bert": BertConfig, "modernbert": ModernBertConfig, "electra": ElectraConfig}  # config.json's


def config_from_dict(d: dict) -> BertConfig | ModernBertConfig | ElectraConfig:
    """A config of any model type (ours or a config.json), by its model_type (BERT's
    dicts, ours and older ones, carry none)."""
    kind = d.get("model_type", "bert")
    if kind not in MODEL_TYPES:
        raise BertmodelError(f"model_type {kind!r} is not supported; only {', '.join(MODEL_TYPES)} models are")
    return MODEL_TYPES[kind].from_dict(d)


def vocabulary_ids(tokenizer, architecture: str) -> dict:
    """The config fields a tokenizer (data.shards.TokenizerInfo) sets: its size and the
    ids of [PAD] (and for ModernBERT, whose config.json carries them, [CLS], [SEP], [MASK])."""
    ids = tokenizer.special_ids
    fields = {"vocab_size": tokenizer.vocab_size, "pad_token_id": ids.get("pad", 0)}
    if architecture == "modernbert":
        fields.update(cls_token_id=ids.get("cls"), sep_token_id=ids.get("sep"), mask_token_id=ids.get("mask"))
    return fields


def preset_config(architecture: str, preset: str, **overrides) -> BertConfig | ModernBertConfig:
    """`--architecture` and `--preset` (with size overrides) -> a config."""
    if architecture not in CONFIGS:
        raise BertmodelError(f"unknown architecture {architecture!r}; choose {' or '.join(CONFIGS)}")
    return CONFIGS[architecture].preset(preset, **overrides)
