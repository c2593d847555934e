"""A bi-encoder: one encoder (BERT, ModernBERT or RoBERTa) for queries and passages alike,
a pooled and normalised vector per text, trained with the in-batch-negatives loss
(model/contrastive.py).

Its tensors are the encoder's alone, under the head models' names (`bert.*`, `model.*`
or `roberta.*`), so checkpoints load like every head's; the export is the bare encoder
(transformers' BertModel / ModernBertModel / RobertaModel or XLMRobertaModel, the module
sentence-transformers wraps) with the sentence-transformers files beside it
(retrieval/sentence_files.py).

Pooling (sentence-transformers' Pooling module): "mean" of the last hidden states over
the real tokens (padding excluded; sum / max(count, 1e-9) as there), or "cls", the first
token's state. BERT's (and RoBERTa's) pooler (dense + tanh) is kept in the weights,
unread, so the export loads in transformers with nothing newly initialised.

Projection (`projection_dim`): a linear map of the pooled vector to another width before
it is normalised, sentence-transformers' Dense module without activation; a distilled
student learns one where its teacher's vectors are wider or narrower than its hidden
states (tasks/embed_distill.py). Its tensors are `projection.weight` / `projection.bias`,
exported as the Dense module's (retrieval/sentence_files.py), not in the encoder's file.

GradCache (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under Memory
Limited Setup"; sentence-transformers' CachedMultipleNegativesRankingLoss does the same):
with `mini_batch_size`, the batch's texts are embedded `mini_batch_size` at a time without
a graph, the loss and its gradient with respect to the embeddings are computed over the
whole batch, and the returned loss carries a hook that, when the trainer calls backward,
embeds each mini-batch again with a graph and back-propagates its cached gradient. The
gradient is the uncached one (the chain rule, split at the embeddings), the memory that
of one mini-batch's activations, so the batch, and with it the number of in-batch
negatives, is bounded by time, not memory. The second pass replays each mini-batch's
dropout: the RNG state of the first is restored for it (torch's CPU generator, which our
dropout draws from, and CUDA's).
Shapes: B queries, N = B(1 + n) passages, Tq, Tp padded lengths, H hidden.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from bertmodel.model.contrastive import DEFAULT_SCALE, contrastive_loss
from bertmodel.model.electra_heads import ElectraWithHead
from bertmodel.model.heads import BertWithHead, HeadModel
from bertmodel.model.modernbert_heads import ModernBertWithHead
from bertmodel.model.roberta_heads import RobertaWithHead, xlm_variant

POOLINGS = ("mean", "cls")


class EmbeddingOutput(NamedTuple):
    loss: torch.Tensor | None
    query_embeddings: torch.Tensor  # (B, D), normalised (detached under GradCache)
    passage_embeddings: torch.Tensor | None  # (N, D)


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """(B, T, H) states -> (B, H), as sentence-transformers' Pooling computes it."""
    if pooling == "cls":
        return hidden[:, 0]
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


class _BiEncoder:
    """The shared forward of both architectures' bi-encoders."""

    def __init__(self, config, pooling: str = "mean", scale: float = DEFAULT_SCALE,
                 mini_batch_size: int | None = None, matryoshka_dims: tuple[int, ...] | None = None,
                 normalize: bool = True, projection_dim: int | None = None):
        super().__init__(config)
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be mean or cls, got {pooling!r}")
        self.pooling, self.scale, self.mini_batch_size = pooling, float(scale), mini_batch_size
        self.matryoshka_dims = tuple(matryoshka_dims) if matryoshka_dims else None
        self.normalize = normalize
        self.projection = torch.nn.Linear(config.hidden_size, projection_dim) if projection_dim else None

    def init_weights(self) -> None:
        super().init_weights()
        if self.projection is not None:  # nn.Linear's own init, as sentence-transformers' Dense starts
            self.projection.reset_parameters()

    def embed(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        """(B, T) -> (B, H) pooled vectors, or (B, projection_dim) projected ones
        (normalised unless normalize is False)."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        hidden = self.encoder(input_ids, token_type_ids, attention_mask)
        vectors = pool(hidden, attention_mask, self.pooling)
        if self.projection is not None:
            vectors = self.projection(vectors)
        return torch.nn.functional.normalize(vectors, p=2, dim=-1) if self.normalize else vectors

    def loss_of(self, queries, passages, text_ids) -> torch.Tensor:
        return contrastive_loss(queries, passages, self.scale, text_ids, self.matryoshka_dims)

    def forward(self, input_ids, attention_mask, token_type_ids=None, passage_input_ids=None,
                passage_attention_mask=None, passage_token_type_ids=None, text_ids=None) -> EmbeddingOutput:
        """input_ids etc.: the queries (B, Tq); passage_*: their positives then their hard
        negatives, column-major (N, Tp). Without passages: the queries' embeddings only."""
        inputs = [(input_ids, attention_mask, token_type_ids)]
        if passage_input_ids is None:
            return EmbeddingOutput(None, self.embed(*inputs[0]), None)
        inputs.append((passage_input_ids, passage_attention_mask, passage_token_type_ids))
        if self.mini_batch_size and self.training and torch.is_grad_enabled():
            return self._cached_forward(inputs, text_ids)
        queries, passages = (self.embed(*x) for x in inputs)
        return EmbeddingOutput(self.loss_of(queries, passages, text_ids), queries, passages)

    # -- GradCache -----------------------------------------------------------------------
    def _chunks(self, inputs):
        """(tensors of one mini-batch, which input, its row slice), queries first."""
        size = self.mini_batch_size
        for which, tensors in enumerate(inputs):
            for start in range(0, tensors[0].shape[0], size):
                rows = slice(start, start + size)
                yield tuple(None if t is None else t[rows] for t in tensors), which, rows

    def _cached_forward(self, inputs, text_ids) -> EmbeddingOutput:
        chunks, states, parts = [], [], ([], [])
        with torch.no_grad():
            for tensors, which, rows in self._chunks(inputs):
                states.append(_rng_state(tensors[0].device))
                chunks.append((tensors, which, rows))
                parts[which].append(self.embed(*tensors))
        queries = torch.cat(parts[0]).requires_grad_()
        passages = torch.cat(parts[1]).requires_grad_()
        with torch.enable_grad():
            loss = self.loss_of(queries, passages, text_ids)
            cached = torch.autograd.grad(loss, (queries, passages))
        out = loss.detach().requires_grad_()
        out.register_hook(lambda grad_output: self._replay(chunks, states, cached, grad_output))
        return EmbeddingOutput(out, queries.detach(), passages.detach())

    def _replay(self, chunks, states, cached, grad_output) -> None:
        """The hook: each mini-batch embedded again, its cached gradient (scaled by the
        loss's own gradient, e.g. 1 / grad_accum) back-propagated into the weights."""
        for (tensors, which, rows), state in zip(chunks, states):
            # Hooks run under the backward pass's no-grad mode: the product too needs a graph.
            with _replaying(state, tensors[0].device), torch.enable_grad():
                vectors = self.embed(*tensors)
                (vectors * (cached[which][rows] * grad_output)).sum().backward()
        return None


def _rng_state(device: torch.device):
    return torch.get_rng_state(), (torch.cuda.get_rng_state(device) if device.type == "cuda" else None)


class _replaying:
    """Within it, the RNGs as `state` had them (the first pass's dropout); after it, as before."""

    def __init__(self, state, device: torch.device):
        self.state, self.device = state, device

    def __enter__(self):
        self.saved = _rng_state(self.device)
        torch.set_rng_state(self.state[0])
        if self.state[1] is not None:
            torch.cuda.set_rng_state(self.state[1], self.device)

    def __exit__(self, *exc):
        torch.set_rng_state(self.saved[0])
        if self.saved[1] is not None:
            torch.cuda.set_rng_state(self.saved[1], self.device)
        return False


class BertBiEncoder(_BiEncoder, BertWithHead):
    hf_architecture = "BertModel"

    def __init__(self, config, **options):
        super().__init__(config, **options)
        self.init_weights()


class ModernBertBiEncoder(_BiEncoder, ModernBertWithHead):
    hf_architecture = "ModernBertModel"

    def __init__(self, config, **options):
        super().__init__(config, **options)
        del self.head  # ModernBertModel's output is read directly (no prediction head)
        self.init_weights()


class RobertaBiEncoder(_BiEncoder, RobertaWithHead):
    hf_architecture = "RobertaModel"
    has_pooler = True  # RobertaModel's default, as BertModel's

    def __init__(self, config, **options):
        super().__init__(config, **options)
        self.init_weights()


BI_ENCODERS: dict[str, type[HeadModel]] = {"bert": BertBiEncoder, "modernbert": ModernBertBiEncoder,
                                           "roberta": RobertaBiEncoder, "xlm-roberta": xlm_variant(RobertaBiEncoder)}


class ElectraBiEncoder(_BiEncoder, ElectraWithHead):
    """An ELECTRA discriminator read as an embedder (its `electra` encoder, pooled); embed
    does not train it (its export is BERT's or ModernBERT's encoder class)."""

    hf_architecture = "ElectraModel"

    def __init__(self, config, **options):
        super().__init__(config, **options)
        self.init_weights()


# What reads texts into vectors: every encoder we load (embed runs, pre-training runs and
# their exports, transformers and sentence-transformers directories); BI_ENCODERS, those
# embed trains and exports, are a part of it.
ENCODER_READERS: dict[str, type[HeadModel]] = {**BI_ENCODERS, "electra": ElectraBiEncoder}
