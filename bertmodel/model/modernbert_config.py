"""The ModernBERT-style encoder's config (model/modernbert.py): field names are those of
`transformers.ModernBertConfig`; base and large are ModernBERT's own shapes (Warner et al.
2024, "Smarter, Better, Faster, Longer", arXiv 2412.13663, table 3). model/config.py
re-exports it beside the other architectures' configs."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from bertmodel.errors import BertmodelError

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
    has_pair_head = False  # pre-trained with MLM alone: no segment embeddings for a pair head to read

    @property
    def max_sequence_length(self) -> int:
        """The longest input, in tokens."""
        return self.max_position_embeddings

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

