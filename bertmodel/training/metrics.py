"""Training metrics: per-step sums kept on the device, FLOP estimates, MFU, metrics.jsonl.

FLOPs per optimizer step (training = forward + backward = 3x forward = 6 per MAC), the
standard estimate (Kaplan et al. 2020; Chowdhery et al. 2022, appendix B) adapted to
what this model actually computes. With N tokens computed (B * T padded, or the real
tokens when attention is unpadded), S attention pairs (sum of key counts over queries)
and Q = B * (1 + P) rows the last layer keeps ([CLS] and the P prediction slots):
  6 * (L - 1) * (4H^2 + 2HI) * N          every token through the first L - 1 layers
  + 12 * (L - 1) * H * S                  their attention scores and weighted sums
  + 6 * 2H^2 * N                          the last layer's keys and values (all tokens)
  + 6 * (2H^2 + 2HI) * Q                  its queries, output and feed-forward at Q rows only
  + 12 * H * Q * N / B                    its attention, Q queries over each row's keys
  + 6 * (H*H + H*V) * (B * P)             MLM transform + decoder, only at P prediction slots
  + 6 * (H*H + 2*H) * B                   pooler + pair head (not for MLM alone)
Embedding lookups are not FLOPs. MFU = achieved FLOP/s / the device's peak dense bf16
FLOP/s from PEAK_BF16_FLOPS (no sparsity), or None when the device is not listed.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from bertmodel.model.config import BertConfig, ModernBertConfig

# Dense bf16 tensor-core peaks from the vendors' datasheets (no 2:4 sparsity), FLOP/s.
PEAK_BF16_FLOPS = {
    "H200": 989e12,
    "H100": 989e12,  # SXM; the PCIe card is 756e12, matched below first
    "H100 PCIe": 756e12,
    "H800": 989e12,
    "H20": 148e12,
    "GH200": 989e12,
    "B200": 2250e12,
    "A100": 312e12,
    "A800": 312e12,
    "A10G": 70e12,
    "A10": 125e12,
    "L40S": 362e12,
    "L40": 181e12,
    "L4": 121e12,
    "RTX 4090": 165e12,
    "RTX 3090": 71e12,
}


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key in sorted(PEAK_BF16_FLOPS, key=len, reverse=True):  # most specific name first
        if key in name:
            return PEAK_BF16_FLOPS[key]
    return None


def encoder_flops(config: BertConfig | ModernBertConfig, batch: int, seq_len: int, last_layer_rows: int | None = None,
                  tokens: int | None = None, attention_pairs: int | None = None) -> float:
    """Training FLOPs (6 per MAC: forward + backward) of the encoder on (batch, seq_len),
    where the last layer computes only `last_layer_rows` rows per sequence when given
    (its keys and values still cover every token). tokens / attention_pairs: what an
    unpadded batch computes (model/unpad.py's unpadded_extent; default the padded
    B * T, B * T^2). Each layer's attention counts the keys it reads (a local layer's
    window, config.attended_pairs)."""
    H, L = config.hidden_size, config.num_hidden_layers
    weights = config.layer_weight_macs()  # per token
    tokens = batch * seq_len if tokens is None else tokens
    pairs = batch * seq_len * seq_len if attention_pairs is None else attention_pairs
    macs = 0.0
    for layer in range(L):
        layer_pairs = config.attended_pairs(layer, pairs, tokens)
        if last_layer_rows is None or layer < L - 1:
            macs += weights * tokens + 2 * H * layer_pairs  # weights + QK^T, AV
        else:
            rows = batch * last_layer_rows
            # K and V for every token; Q, the output and the MLP for the kept rows, each
            # attending to its own sequence's keys (tokens / batch on average; locally at
            # most the window): as pairs of `rows` queries of that many keys.
            kept_pairs = config.attended_pairs(layer, rows * tokens / batch, rows)
            macs += 2 * H * H * tokens + (weights - 2 * H * H) * rows + 2 * H * kept_pairs
    return 6 * macs


def train_flops(config: BertConfig | ModernBertConfig, batch: int, seq_len: int, predictions: int, pair_head: bool = True,
                tokens: int | None = None, attention_pairs: int | None = None) -> float:
    """Training FLOPs (forward + backward) of one pre-training micro-batch of shape
    (batch, seq_len) with `predictions` MLM slots per row: the encoder, its last layer at
    [CLS] and the slots, the MLM head there (and the pair head); tokens /
    attention_pairs: what an unpadded batch computes (default: the padded B * T and B * T^2)."""
    H, V = config.hidden_size, config.vocab_size
    flops = encoder_flops(config, batch, seq_len, 1 + predictions, tokens, attention_pairs)
    flops += 6 * (H * H + H * V) * batch * predictions
    if pair_head:
        flops += 6 * (H * H + 2 * H) * batch
    return flops


class StepStats:
    """Sums over the micro-batches of one logging interval, on the device (no syncs)."""

    FIELDS = ("loss", "mlm_loss", "nsp_loss", "mlm_correct", "mlm_total", "nsp_correct")

    def __init__(self, device: torch.device):
        self.sums = torch.zeros(len(self.FIELDS), dtype=torch.float64, device=device)
        self.micro_batches = 0
        self.samples = 0

    @torch.no_grad()
    def add(self, out, labels: torch.Tensor, nsp_labels: torch.Tensor) -> None:
        valid = labels != -100
        mlm_correct = ((out.mlm_logits.argmax(-1) == labels) & valid).sum()
        if out.nsp_logits is None:  # MLM alone: no pair head
            nsp_correct = nsp_loss = torch.zeros((), device=labels.device)
        else:
            nsp_correct, nsp_loss = (out.nsp_logits.argmax(-1) == nsp_labels).sum(), out.nsp_loss
        parts = (out.loss, out.mlm_loss, nsp_loss, mlm_correct, valid.sum(), nsp_correct)
        self.sums += torch.stack([p.detach().double() for p in parts])
        self.micro_batches += 1
        self.samples += nsp_labels.numel()

    def totals(self) -> torch.Tensor:
        """[sums..., micro_batches, samples] as one tensor, for an all-reduce across ranks."""
        extra = torch.tensor([self.micro_batches, self.samples], dtype=torch.float64, device=self.sums.device)
        return torch.cat([self.sums, extra])

    @classmethod
    def summarize(cls, totals: torch.Tensor) -> dict:
        values = totals.tolist()
        s = dict(zip(cls.FIELDS, values))
        n, samples = max(1.0, values[-2]), max(1.0, values[-1])
        return {"loss": s["loss"] / n, "mlm_loss": s["mlm_loss"] / n, "nsp_loss": s["nsp_loss"] / n,
                "mlm_acc": s["mlm_correct"] / max(1.0, s["mlm_total"]), "nsp_acc": s["nsp_correct"] / samples}

    def reset(self) -> None:
        self.sums.zero_()
        self.micro_batches = self.samples = 0


def _step_of(line: str) -> float:
    """A record's step; a blank line, or one torn by a crash mid-write, counts as past any step."""
    try:
        return json.loads(line).get("step", 0)
    except (ValueError, AttributeError):
        return math.inf


class MetricsWriter:
    """Appends one JSON object per line to RUN/metrics.jsonl (rank 0 only).

    reporters (see bertmodel.training.reporting.open_reporters): also given every record written,
    and closed with the writer."""

    def __init__(self, path: Path, resume_step: int | None = None, reporters=None):
        self.path = Path(path)
        self.reporters = reporters
        if resume_step is not None and self.path.exists():
            # Drop records a killed run wrote after the checkpoint we resume from, so the
            # file reads as one uninterrupted run.
            kept = [line for line in self.path.read_text().splitlines() if _step_of(line) <= resume_step]
            self.path.write_text("".join(line + "\n" for line in kept))
        self._file = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        self._file.write(json.dumps(clean) + "\n")
        self._file.flush()
        if self.reporters is not None:
            self.reporters.log(record)

    def close(self) -> None:
        self._file.close()
        if self.reporters is not None:
            self.reporters.close()


def format_count(n: float, unit: str = "") -> str:
    """1234567 -> '1.23M' (STYLE.md: big numbers with units)."""
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.2f}{suffix}{unit}"
    return f"{n:.0f}{unit}"
