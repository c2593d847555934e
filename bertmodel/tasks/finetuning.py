"""What the fine-tuning tasks share: the starting model (any BERT: one of our runs or
checkpoints, or a transformers directory of any head), its tokenizer, the batch
padding policy and the metric that picks the best model (whole-set passes in fixed order:
training/batched_forward.py; the tokenizer path the encoders read: data/shards.py).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from bertmodel.model import head_class
from bertmodel.model.config import PRESETS, BertConfig, preset_config, vocabulary_ids
from bertmodel.data.labels import head_labels
from bertmodel.data.shards import TokenizerInfo, tokenizer_info, tokenizer_path
from bertmodel.distill.kd_loss import DistillationStats, TaskDistillation
from bertmodel.distill.teacher import TaskTeacher, check_labels, open_teacher
from bertmodel.errors import BertmodelError
from bertmodel.hf import Pretrained, load_into, load_pretrained
from bertmodel.training.run_dir import source_identity


RANDOM_PREFIX = "random:"  # --model random:PRESET: a preset's shape, no weights


def open_model(model: str, tokenizer: str | None, architecture: str = "bert") -> tuple[Pretrained, TokenizerInfo]:
    """The pretrained model a fine-tuning run starts from, and the tokenizer to use.
    `random:PRESET` is a preset's shape of `architecture` with no weights (the tokenizer
    must be given); any other model carries its architecture."""
    if model.startswith(RANDOM_PREFIX):
        return _random_preset(model.removeprefix(RANDOM_PREFIX), tokenizer, architecture)
    pre = load_pretrained(model)
    tok = tokenizer_info(Path(tokenizer)) if tokenizer else pre.tokenizer
    if tok is None:
        raise BertmodelError(f"{model}: no tokenizer files (vocab.txt or tokenizer.json) stored with it; "
                             "pass --tokenizer")
    if tok.vocab_size != pre.config.vocab_size:
        raise BertmodelError(f"{model}: the model has {pre.config.vocab_size:,} word embeddings but the tokenizer "
                             f"{tok.vocab_size:,} entries; pass the model's own tokenizer")
    return pre, tok


def _random_preset(preset: str, tokenizer: str | None, architecture: str) -> tuple[Pretrained, TokenizerInfo]:
    if preset not in PRESETS:
        raise BertmodelError(f"--model {RANDOM_PREFIX}{preset}: no such preset; choose one of "
                             + ", ".join(f"{RANDOM_PREFIX}{p}" for p in PRESETS))
    if not tokenizer:
        raise BertmodelError(f"--model {RANDOM_PREFIX}{preset} has no tokenizer of its own; pass --tokenizer")
    tok = tokenizer_info(Path(tokenizer))
    config = preset_config(architecture, preset, **vocabulary_ids(tok, architecture))
    return Pretrained(config, {}, tok, Path(f"{RANDOM_PREFIX}{preset}"), architecture="none"), tok


def split_identity(cfg, which: str, read: str | None = None) -> dict | None:
    """How a run records its train or validation data (training/run_dir.py): a file or
    save_to_disk directory by content (and the split read from it), a hub dataset by
    name, config and split. `read`: the split the task resolved when the option names
    none of the source's own (a BEIR directory's dev or test for "validation")."""
    path, split = getattr(cfg, which), read or getattr(cfg, f"{which}_split")
    if path:
        identity = source_identity(path)
        return {**identity, "split": split} if Path(path).is_dir() else identity
    if cfg.dataset:
        return {"source": f"{cfg.dataset}[{cfg.dataset_config or ''}]:{split}"}
    return None


def check_length(max_seq_length: int, config: BertConfig, source) -> None:
    if max_seq_length > config.max_sequence_length:
        raise BertmodelError(f"--max-seq-length {max_seq_length} is longer than {source}'s "
                             f"{config.max_sequence_length} positions")


def start_from(model_cls, pre: Pretrained, log, init: str = "pretrained", labels: list[str] | None = None,
               **head) -> torch.nn.Module:
    """A head model with the pretrained encoder (and head, where the source has the
    same one); what was initialised anew or left out is logged. init "random": the
    source's shape only, every weight drawn afresh (normal(0.02), from the run's seed):
    the control that shows what pre-training bought.

    The source's head is kept only where it is the same head for the same classes: the
    same transformers class and, where the task has labels, the same labels in the same
    order. Heads share tensor names (`classifier.*`), so a regression head would fit a
    choice scorer and a NER head with its labels in another order would fit ours, row
    for row on the wrong classes."""
    model = model_cls(pre.config, **head)
    if init == "random" or not pre.state_dict:
        log(f"initialised at random in the shape of {pre.source} ({pre.config.num_hidden_layers} layers, hidden "
            f"{pre.config.hidden_size}): no pre-trained weights")
        return model
    source = pre
    theirs = source_labels(pre)
    if pre.architecture != model_cls.hf_architecture or (labels is not None and theirs != list(labels)):
        ours = _head_names(model)  # the source's other tensors (an MLM head) load_into reports as unused
        # The encoder, and modules every head of the architecture shares (ModernBERT's
        # `head`: transformers loads it from an MLM checkpoint into any head, so do we).
        shared = (f"{model_cls.encoder_name}.", *(f"{m}." for m in model_cls.shared_head))
        kept = {k: v for k, v in pre.state_dict.items() if k.startswith(shared) or k.split(".")[0] not in ours}
        if len(kept) < len(pre.state_dict):
            why = (f"a {pre.architecture} head" if pre.architecture != model_cls.hf_architecture
                   else f"its labels ({', '.join(theirs or [])}) are not this run's ({', '.join(labels)})")
            log(f"the head of {pre.source} is not used: {why}")
        source = dataclasses.replace(pre, state_dict=kept)
    for note in load_into(model, source):
        log(note)
    log(f"initialised from {pre.source} ({pre.architecture})")
    return model


def source_labels(pre: Pretrained) -> list[str] | None:
    """The classes of a pretrained head in id order (config.json's id2label), or None."""
    return head_labels(pre.head)


def _head_names(model: torch.nn.Module) -> set[str]:
    """The model's top-level modules other than the encoder (its head)."""
    return {name for name, _ in model.named_children() if name != model.encoder_name}


class FinetuningTask:
    """What every fine-tuning task opens first: the starting model and its tokenizer, the
    head for the task on the model's architecture (`head_kind`, model.HEADS), the length
    check, the tokenizer path the encoders read, and the batch padding policy."""

    head_kind = ""

    def __init__(self, cfg, d, log):
        self.cfg, self.d, self.log = cfg, d, log
        wanted = getattr(cfg, "architecture", None)
        self.pre, self.tokenizer = open_model(cfg.model, cfg.tokenizer, wanted or "bert")
        if wanted is not None and self.pre.config.architecture != wanted:
            raise BertmodelError(f"--architecture {wanted} conflicts with {cfg.model}, a {self.pre.config.architecture} "
                                 "model; a model brings its architecture, so drop --architecture")
        pooling = getattr(cfg, "classifier_pooling", None)
        if pooling is not None:
            if self.pre.config.architecture != "modernbert":
                raise BertmodelError(f"--classifier-pooling is for the modernbert architecture; {cfg.model} is "
                                     f"{self.pre.config.architecture} (which reads its first token)")
            self.pre = dataclasses.replace(self.pre, config=dataclasses.replace(self.pre.config,
                                                                                classifier_pooling=pooling))
        self.model_class = head_class(self.pre.config, self.head_kind)
        self.architecture = self.model_class.hf_architecture
        check_length(cfg.max_seq_length, self.pre.config, cfg.model)
        self.tok = tokenizer_path(self.tokenizer)
        self.pad, self.multiple = self.tokenizer.special_ids.get("pad", 0), pad_multiple(d.device)
        if self.pre.config.architecture == "roberta" and self.pad != self.pre.config.pad_token_id:
            # RoBERTa tells padding by its id (positions count the other tokens): another id would be read as text
            raise BertmodelError(f"{cfg.model}: the model's padding id is {self.pre.config.pad_token_id} but the "
                                 f"tokenizer pads with {self.pad}; pass the model's own tokenizer")
        self.kd_teacher = self._open_teacher()

    # -- task distillation (--teacher; distill/) -------------------------------------------
    logit_pairs = None
    """A task that distils from a fine-tuned teacher says here which outputs (and positions)
    the two models are compared on: a staticmethod (student_out, teacher_out, batch) ->
    [(student (N, K), teacher (N, K)), ...] (distill/kd_loss.py); None: the task does not."""

    def head_labels(self) -> list[str] | None:
        """The head's classes in id order (a teacher's must be the same); None where it has none."""
        return None

    def _open_teacher(self) -> TaskTeacher | None:
        """--teacher, opened and checked against the model (its task, tokenizer and positions)
        before any data is read; the labels, once the task knows them (check_teacher_labels)."""
        path = getattr(self.cfg, "teacher", None)
        if not path or self.logit_pairs is None:
            return None
        teacher = open_teacher(path, self.head_kind, self.tokenizer)
        check_length(self.cfg.max_seq_length, teacher.pretrained.config, f"--teacher {path}")
        return teacher

    def check_teacher_labels(self) -> None:
        """A task with labels calls this as soon as it knows them, before it reports its data."""
        if self.kd_teacher is not None:
            check_labels(self.kd_teacher, self.head_labels())

    def teacher_input(self) -> dict:
        """inputs()' record of the teacher: the directory its weights came from, by content,
        so that a resume with another teacher is refused as other data is."""
        return {} if self.kd_teacher is None else {"teacher": source_identity(self.kd_teacher.source)}

    def training_module(self, model, device) -> torch.nn.Module:
        """The student and its frozen teacher (distill/kd_loss.TaskDistillation), or the model
        itself without a teacher."""
        if self.kd_teacher is None:
            return model
        alpha, temperature = self.cfg.kd_alpha, self.cfg.kd_temperature
        self.log(f"teacher: {self.kd_teacher.describe()}; loss = {alpha:g} x {temperature:g}^2 x KL(teacher || "
                 f"student) + {1 - alpha:g} x the task's loss")
        return TaskDistillation(model, self.kd_teacher.model.to(device), self.logit_pairs, alpha, temperature)

    def distilling(self, stats):
        """A task's interval stats, with the distillation loss's two parts beside them."""
        return stats if self.kd_teacher is None else DistillationStats(stats)


LOWER_IS_BETTER = ("loss", "mse")


def best_metric(chosen: str | None, default: str, reported: list[str]) -> tuple[str, bool]:
    """(metric, greater is better) that picks the model kept in RUN/hf; a name the task
    does not report is refused before training (it would keep no best model at all)."""
    name = chosen or default
    if name not in reported:
        raise BertmodelError(f"--metric-for-best {name}: not a metric this task reports; choose one of "
                             f"{', '.join(reported)}")
    return name, name not in LOWER_IS_BETTER


class IntervalStats:
    """Loss and correct predictions per logging interval, summed on the device (no
    syncs); the fine-tuning tasks say what "correct" is and how to name it."""

    def __init__(self, device: torch.device):
        self.sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss, correct, micro-batches
        self.samples = 0

    @torch.no_grad()
    def add_counts(self, loss: torch.Tensor, correct: torch.Tensor, samples: int) -> None:
        one = torch.ones((), dtype=torch.float64, device=self.sums.device)
        self.sums += torch.stack([loss.detach().double(), correct.double(), one])
        self.samples += samples

    def totals(self) -> torch.Tensor:
        return torch.cat([self.sums, torch.tensor([self.samples], dtype=torch.float64, device=self.sums.device)])

    @staticmethod
    def means(totals: torch.Tensor) -> tuple[float, float]:
        """(mean loss per micro-batch, correct per sample) from totals summed over ranks."""
        loss, correct, n, samples = totals.tolist()
        return loss / max(1.0, n), correct / max(1.0, samples)

    def reset(self) -> None:
        self.sums.zero_()
        self.samples = 0


def pad_multiple(device: torch.device) -> int:
    # Multiples of 8 feed tensor cores on CUDA; on a CPU every padded column is wasted work.
    return 8 if device.type == "cuda" else 1
