"""Task-agnostic distillation (`pretrain --objective minilm --teacher DIR`): MiniLMv2
(Wang et al. 2021, arXiv 2012.15828), the student's last layer learning the Q-Q, K-K and
V-V self-attention relations of one teacher layer (distill/relations.py), optionally
plus TinyBERT's hidden-state MSE; no labels.

Data: the pre-training task's shards (tasks/pretraining.py opens and checks them, as for
every objective), read as plain text (`OriginalText`): every masked position given back
its original token (the shards keep masked_lm_ids), the MLM slots and pair labels
dropped. Rows of any pairing are text; `bertprep build-shards --pairs none`
(FULL-SENTENCES rows) is the plain-text route, built with the teacher's tokenizer.

The teacher: --teacher, any model hf.load_pretrained reads (our run or checkpoint, a
transformers BERT, RoBERTa/XLM-R, ModernBERT or ELECTRA directory), opened once, its
encoder frozen in eval mode (distill/minilm.py), moved to the device in
training_module; it is in no checkpoint and not in the optimizer. Its tokenizer must be
the shards' (so the student's): checked in one line naming both.

The student: a preset and the size options (--architecture bert, modernbert or roberta),
or --init-from any model of those types (a `bertmodel shrink` output, a run, a
transformers directory), with the teacher's tokenizer. Any width and depth: the relation
heads (--relation-heads, default the teacher's attention heads) must divide both widths.

Per logging interval and evaluation (the first --eval-batches batches of --eval-data,
dropout off): loss, qq_kl, kk_kl, vv_kl (and hidden_mse with --hidden-distill-weight).
Export: RUN/hf is the student's bare encoder (BertModel, ModernBertModel, RobertaModel,
XLMRobertaModel) with the tokenizer, which every finetune command takes; a hidden-state
projection stays in the checkpoints.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from bertmodel.data.recipes import restore_originals
from bertmodel.distill.minilm import STUDENTS, MiniLMOutput, RelationDistillation, teacher_encoder
from bertmodel.errors import BertmodelError
from bertmodel.hf import UnsupportedModel, export_hf, load_into, load_pretrained
from bertmodel.model.config import config_from_dict
from bertmodel.tasks.pretraining import PretrainingTask
from bertmodel.training import parallel
from bertmodel.training.metrics import encoder_flops
from bertmodel.training.run_dir import source_identity

PROJECTION = "hidden_projection."  # the student's tensors that are not its encoder's


class OriginalText:
    """Shard rows as text: input_ids with every masked position's original token,
    token_type_ids and attention_mask; nothing of the MLM slots or pair labels."""

    def __init__(self, shards):
        self.shards = shards

    def __len__(self) -> int:
        return len(self.shards)

    def __getattr__(self, name):  # tokenizer, dirs, max_seq_length ... of the shards
        return getattr(self.shards, name)

    def collate(self, rows: np.ndarray, max_len: int | None = None) -> dict[str, np.ndarray]:
        arrays = self.shards.collate(rows, max_len)
        return {"input_ids": restore_originals(arrays), "token_type_ids": arrays["token_type_ids"],
                "attention_mask": arrays["attention_mask"]}


class MiniLMStats:
    """Sums over one logging interval's micro-batches, on the device (no syncs)."""

    FIELDS = ("loss", "qq_kl", "kk_kl", "vv_kl", "hidden_mse")

    def __init__(self, device: torch.device, hidden: bool):
        self.sums = torch.zeros(len(self.FIELDS) + 1, dtype=torch.float64, device=device)  # + micro-batches
        self.hidden = hidden

    @torch.no_grad()
    def add(self, out: MiniLMOutput, tensors: dict) -> None:
        mse = out.hidden_mse if out.hidden_mse is not None else torch.zeros((), device=out.loss.device)
        one = torch.ones((), device=out.loss.device)
        parts = (out.loss, out.query_kl, out.key_kl, out.value_kl, mse, one)
        self.sums += torch.stack([p.detach().double() for p in parts])

    def totals(self) -> torch.Tensor:
        return self.sums.clone()

    def summarize(self, totals: torch.Tensor) -> dict:
        values = totals.tolist()
        n = max(1.0, values[-1])
        summary = {name: value / n for name, value in zip(self.FIELDS, values)}
        if not self.hidden:
            del summary["hidden_mse"]
        return summary

    def reset(self) -> None:
        self.sums.zero_()


def _first_layers(config, layers: int):
    """The config of the encoder's first `layers` layers (ModernBERT's kinds with them)."""
    kinds = getattr(config, "layer_types", None)
    return dataclasses.replace(config, num_hidden_layers=layers,
                               **({"layer_types": kinds[:layers]} if kinds is not None else {}))


def layer_states_flops(config, layer: int, B: int, T: int, output: bool) -> float:
    """Training FLOPs (6 per MAC) of model/layer_states.py on a (B, T) batch: the layers
    below `layer`, its Q/K/V projections, and with `output` the whole layer too (which
    projects them again)."""
    below = encoder_flops(_first_layers(config, layer - 1), B, T) if layer > 1 else 0.0
    qkv = 6 * 3 * config.hidden_size ** 2 * B * T
    whole = encoder_flops(_first_layers(config, layer), B, T) - below if output else 0.0
    return below + qkv + whole


class MiniLMTask(PretrainingTask):
    def __init__(self, cfg, d: parallel.Dist, log):
        if cfg.masking == "dynamic":
            raise BertmodelError("--masking dynamic masks tokens afresh; --objective minilm reads the shards' text "
                                 "with every mask undone, so drop it")
        if cfg.head_warmup_steps:
            raise BertmodelError("--head-warmup-steps trains an MLM head alone; a minilm student is a plain encoder "
                                 "with no head to warm up")
        super().__init__(cfg, d, log)
        self.train_set = OriginalText(self.shards)
        if self.eval_data is not None:
            self.eval_data = OriginalText(self.eval_data)
        self.hidden = cfg.hidden_distill_weight > 0
        student = self.init.config if self.init is not None else self._wanted_config()
        self.student_class = STUDENTS[student.model_type]
        self.architecture = self.student_class.hf_architecture
        pre = self._open_teacher(cfg.teacher)
        self.teacher_config = config = pre.config
        self.teacher_layer = cfg.teacher_layer or config.num_hidden_layers
        if self.teacher_layer > config.num_hidden_layers:
            raise BertmodelError(f"--teacher-layer {self.teacher_layer}: {cfg.teacher} has {config.num_hidden_layers} "
                                 "layers")
        self.relation_heads = cfg.relation_heads or config.num_attention_heads
        for who, width in (("the teacher's", config.hidden_size), ("the student's", student.hidden_size)):
            if width % self.relation_heads:
                given = ("--relation-heads" if cfg.relation_heads else
                         "the teacher's attention heads (the default --relation-heads)")
                raise BertmodelError(f"{given} {self.relation_heads} do not divide {who} width {width}; give "
                                     "--relation-heads N that divides both widths")
        self.teacher = teacher_encoder(pre)
        self.teacher_source = pre.source  # the directory its weights came from (a run's latest checkpoint)
        projection = (f", projected {student.hidden_size} -> {config.hidden_size}"
                      if config.hidden_size != student.hidden_size else "")
        hidden = f" + {cfg.hidden_distill_weight:g} x hidden-state MSE{projection}" if self.hidden else ""
        self.notes.append(f"MiniLMv2 distillation: the student's last layer learns the Q-Q, K-K, V-V relations of "
                          f"layer {self.teacher_layer} of {config.num_hidden_layers} of {cfg.teacher} (hidden "
                          f"{config.hidden_size}, {config.num_attention_heads} heads), {self.relation_heads} relation "
                          f"heads{hidden}; exports RUN/hf as {self.architecture}")

    def _load_init(self, path):
        pre = super()._load_init(path)
        if pre.config.model_type not in STUDENTS:
            raise BertmodelError(f"{path}: a {pre.config.model_type} model ({pre.architecture}); a minilm student is "
                                 f"a {', '.join(STUDENTS)} encoder")
        return pre

    def _open_teacher(self, path):
        """The teacher, checked against the shards: its tokenizer and its positions."""
        try:
            pre = load_pretrained(path)
        except UnsupportedModel as exc:
            raise BertmodelError(f"--teacher {exc.path}: is a {exc.model_type} model; a teacher is a model bertmodel "
                                 "reads (bert, roberta, xlm-roberta, modernbert, electra)") from None
        data = self.cfg.data[0]
        if pre.tokenizer is None:
            raise BertmodelError(f"--teacher {path}: no tokenizer files stored with it, so it cannot be checked to "
                                 f"read the tokens of {data}")
        if diff := pre.tokenizer.same_as(self.tokenizer):
            raise BertmodelError(f"--teacher {path}: its tokenizer is not the one {data} was built with ({diff}); "
                                 f"build the shards with the teacher's tokenizer (bertprep build-shards --tokenizer "
                                 f"{path} --pairs none)")
        for shards in (self.shards, self.eval_data):
            if shards is not None and shards.max_seq_length > pre.config.max_sequence_length:
                raise BertmodelError(f"--teacher {path}: has {pre.config.max_sequence_length} positions, but the "
                                     f"shards hold sequences of {shards.max_seq_length} tokens")
        return pre

    # -- the model -------------------------------------------------------------------
    def _student(self, config):
        self._check_positions(config)
        return self.student_class(config, self.teacher_config.hidden_size if self.hidden else None)

    def fresh_model(self, log):
        if not self.cfg.init_from:
            return self._student(self._wanted_config())
        pre = self.checked_source(log)
        model = self._student(pre.config)
        notes = load_into(model, pre)
        log(f"student initialised from {pre.source} ({pre.architecture})" + "".join(f"; {n}" for n in notes))
        return model

    def model_for_checkpoint(self, resume: dict):
        self.own_checkpoint_task(resume, "minilm", "a minilm distillation")
        config = config_from_dict(resume["config"])
        if not self.cfg.init_from:
            self._check_same_model(config, (resume.get("train") or {}).get("init_from"))
        model = self._student(config)
        shapes = lambda sd: {k: tuple(v.shape) for k, v in sd.items() if k.startswith(PROJECTION)}  # noqa: E731
        if shapes(resume["model"]) != shapes(model.state_dict()):
            has = lambda sd: "a" if shapes(sd) else "no"  # noqa: E731
            raise BertmodelError(f"{self.cfg.out}: its student has {has(resume['model'])} hidden-state projection "
                                 f"and these options give {has(model.state_dict())}; resume with the run's own "
                                 "--teacher and --hidden-distill-weight")
        model.load_state_dict(resume["model"])
        return model

    def partial_steps(self, model):
        """A grown vocabulary's new rows alone first (--new-rows-only-steps); no head to warm up."""
        steps = self.cfg.new_rows_only_steps
        return self.growth.new_rows_only(model, steps) if steps else None

    def distiller(self, model, device: torch.device) -> RelationDistillation:
        """The student and the teacher (moved to `device`) as one module: its output's loss
        is the distillation loss."""
        return RelationDistillation(model, self.teacher.to(device), self.teacher_layer, self.relation_heads,
                                    self.cfg.hidden_distill_weight)

    def training_module(self, model, device: torch.device) -> RelationDistillation:
        return self.distiller(model, device)

    # -- what the loop asks per step -----------------------------------------------------
    def new_stats(self, device: torch.device) -> MiniLMStats:
        return MiniLMStats(device, self.hidden)

    def flops(self, config, tensors: dict, extent: dict | None = None) -> float:
        """The student's layer states (forward and backward), the teacher's (forward: a
        third), and the three relations' scores, T x T per relation head: 2 FLOPs per MAC
        for the teacher's, 6 for the student's. Always padded (the states are)."""
        B, T = tensors["input_ids"].shape
        teacher = self.teacher_config
        flops = layer_states_flops(config, config.num_hidden_layers, B, T, self.hidden)
        flops += layer_states_flops(teacher, self.teacher_layer, B, T, self.hidden) / 3
        flops += 3 * B * T * T * (2 * teacher.hidden_size + 6 * config.hidden_size)
        if self.hidden and teacher.hidden_size != config.hidden_size:
            flops += 6 * config.hidden_size * teacher.hidden_size * B * T
        return flops

    @torch.no_grad()
    def evaluate(self, model, d: parallel.Dist, autocast, on_batch=None) -> dict:
        """The training figures on the first eval_batches batches of the held-out shards
        (their text; each_held_out_batch), dropout off."""
        stats = MiniLMStats(d.device, self.hidden)
        distiller = self.distiller(model, d.device)

        def score(batch: dict) -> None:
            with autocast:
                out = distiller(**batch)
            stats.add(out, batch)

        self.each_held_out_batch(model, d, score, on_batch)
        summary = stats.summarize(parallel.all_reduce_sum(stats.totals(), d))
        return {f"eval_{k}": v for k, v in summary.items()}

    def inputs(self) -> dict:
        """The shards (tasks/pretraining.py) and the teacher, by content: a resume with
        another teacher is refused as one on other data is."""
        return {**super().inputs(), "teacher": source_identity(self.teacher_source)}

    def state(self) -> dict:
        return {"name": self.name, "architecture": self.architecture, "objective": "minilm",
                "teacher": str(self.cfg.teacher), "teacher_layer": self.teacher_layer,
                "relation_heads": self.relation_heads, "hidden_distill_weight": self.cfg.hidden_distill_weight,
                "train_only": [PROJECTION]}

    def export(self, source, run: Path, config) -> None:
        """RUN/hf: the student's encoder alone (export_hf leaves the state's `train_only`,
        the hidden-state projection, out; so does `export-hf` of a checkpoint)."""
        state_dict = source.state_dict() if isinstance(source, torch.nn.Module) else source["model"]
        export_hf({"model": state_dict, "config": config.to_dict(), "task": self.state()}, run / "hf",
                  tokenizer=self.tokenizer)
