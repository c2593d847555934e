"""`pretrain`: BERT pre-training (masked LM + next sentence / sentence order, MLM alone,
ELECTRA's replaced-token detection, or MiniLMv2's task-agnostic distillation) = the
pre-training task (tasks/pretraining.py; tasks/rtd.py for RTD, tasks/minilm.py for
distillation) on the generic trainer (training/run.py).

TrainConfig extends the loop's options (training/options.py) with what pre-training
adds: shard directories, the model size, held-out shards, the shard check, the
tokenizer for shard directories that carry none, and the recipe (masking, rate or its
schedule, objective, batch-size warmup, ModernBERT's RoPE bases).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from bertmodel.model.config import (ARCHITECTURES, CONFIGS, BertConfig, ModernBertConfig, RobertaConfig, preset_config,
                                    vocabulary_ids)
from bertmodel.data.schedules import MaskRateSchedule, parse_batch_warmup, parse_mask_rate_schedule
from bertmodel.errors import BertmodelError
from bertmodel.tasks.minilm import MiniLMTask
from bertmodel.tasks.pretraining import PretrainingTask
from bertmodel.tasks.rtd import RTDTask
from bertmodel.training.options import LoopConfig
from bertmodel.training.run import run_training


@dataclass(kw_only=True)
class TrainConfig(LoopConfig):
    data: list[str]
    """Shard directories written by `bertprep build-shards` (read together)."""
    architecture: str | None = None
    """"bert", "modernbert" or "roberta" (model/config.py); None: bert, or --init-from's."""
    preset: str | None = None
    """Model size preset of the architecture (config.PRESETS, MODERNBERT_PRESETS; base when not given);
    --layers/--hidden/--heads/--intermediate override."""
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    intermediate: int | None = None
    eval_data: list[str] = field(default_factory=list)
    eval_batches: int = 50
    init_from: str | None = None
    """The model to start from: one of our runs/checkpoints or a transformers BERT (BertModel, BertForMaskedLM,
    BertForPreTraining), RoBERTa/XLM-R, ModernBERT or ELECTRA dir; its MLM head loads where it has one
    (tasks/warm_start.py; an ELECTRA pair with --objective rtd: tasks/electra_start.py)."""
    new_rows_only_steps: int = 0
    """With --init-from a model whose tokenizer the shards' tokenizer extends (its vocabulary grows,
    tasks/vocab_growth.py): the first N steps train only the new embedding rows, every other weight frozen."""
    init_generator: str | None = None
    """--objective rtd from transformers' ELECTRA pair: the generator (ElectraForMaskedLM) of the
    discriminator in --init-from (tasks/electra_start.py)."""
    head_warmup_steps: int = 0
    """With --init-from: the first K steps train the head alone (a fresh one, where the source has no MLM
    head), the encoder keeping the source's weights bit for bit (tasks/warm_start.py)."""
    verify: str = "sha256"  # shard check: "sha256" or "size" (see data/shards.py)
    tokenizer: str | None = None
    """Tokenizer (vocab.txt, tokenizer.json or dir) for shard dirs that carry none."""
    masking: str = "static"
    """"static": the shards' masks; "dynamic": the original tokens masked afresh per epoch by
    bertprep's rules (RoBERTa), from (seed, epoch, sample index), so resume stays exact."""
    mask_rate: float | None = None
    """Dynamic masking's share of tokens to predict (e.g. 0.3); None: the shards' masked_lm_prob."""
    max_predictions: int | None = None
    """Dynamic masking's cap per row; None: the shards' cap scaled with the rate (20 at 0.15 -> 40 at 0.3)."""
    objective: str | None = None
    """"mlm+nsp", "mlm+sop", "mlm" (no pair head, exports BertForMaskedLM) or "rtd" (ELECTRA's replaced-token
    detection: a generator and a discriminator, model/rtd.py); None: what the shards hold."""
    generator_size: float | None = None
    """rtd: the generator's hidden size, heads and feed-forward width as a fraction of the discriminator's;
    None: 1/3 (ELECTRA-Base; Large used 1/4)."""
    generator_layers: float | None = None
    """rtd: the generator's depth as a fraction of the discriminator's; None: 1.0 (ELECTRA's)."""
    discriminator_weight: float | None = None
    """rtd: lambda, the weight of the discriminator's loss (loss = MLM + lambda x BCE); None: 50 (ELECTRA's)."""
    embedding_sharing: str | None = None
    """rtd: "tied" (ELECTRA: one token table for both) or "gdes" (DeBERTaV3: the discriminator reads
    stop-gradient(E) + its own delta); None: tied."""
    mask_rate_schedule: str | None = None
    """Dynamic masking's rate per step, e.g. "0.3:0.15@80%" or "linear:0.3@0,0.15@100%" (grammar:
    data/schedules.py); the cap per row fits its highest rate."""
    batch_size_warmup: str | None = None
    """"START:TOKENS" (e.g. "768:50B") or "START:Nsteps": the global batch grows linearly in steps from
    START samples to the full one over the warmup (data/schedules.py); the lr schedule still counts steps."""
    rope_theta: str | None = None
    """ModernBERT only: "G" or "G,L", the RoPE base of the global (and local) attention layers, for a
    fresh model or one from --init-from (context extension: 10,000 -> 160,000); None: the preset's
    (160,000, 10,000) or --init-from's."""

    teacher: str | None = None
    """--objective minilm: the model distilled from (our run/checkpoint or a transformers directory of any
    architecture we read), whose tokenizer must be the shards' (tasks/minilm.py)."""
    teacher_layer: int | None = None
    """minilm: the teacher layer (counted from 1) whose self-attention relations the student's last layer
    learns; None: the last (MiniLMv2 takes an upper-middle one for large teachers)."""
    relation_heads: int | None = None
    """minilm: the relation heads the queries, keys and values are split into (each width must divide by
    it); None: the teacher's attention heads."""
    hidden_distill_weight: float = 0.0
    """minilm: the weight of an added MSE between the student's last hidden states and the teacher layer's
    (TinyBERT), through a learnt projection where the widths differ; 0: relations alone (MiniLMv2)."""

    decay_only: bool = False
    """Re-annealing: the lr starts at --lr at step 0 and decays over all of --max-steps with --decay-shape
    to 0, no warmup and no stable phase: --schedule wsd --warmup-steps 0 --decay-ratio 1, said in one
    flag (a released pre-decay checkpoint, e.g. ModernBERT's or Ettin's, decayed on one's own data)."""

    def __post_init__(self):
        super().__post_init__()
        if self.masking not in ("static", "dynamic"):
            raise BertmodelError(f"masking must be static or dynamic, got {self.masking!r}")
        if self.masking == "static" and (self.mask_rate is not None or self.max_predictions is not None):
            raise BertmodelError("--mask-rate and --max-predictions re-mask the rows: use them with --masking dynamic")
        if self.mask_rate is not None and not 0 < self.mask_rate < 1:
            raise BertmodelError(f"mask-rate must be strictly between 0 and 1, got {self.mask_rate}")
        if self.max_predictions is not None and self.max_predictions < 1:
            raise BertmodelError(f"max-predictions must be positive, got {self.max_predictions}")
        if self.objective not in (None, "mlm+nsp", "mlm+sop", "mlm", "rtd", "minilm"):
            raise BertmodelError(f"objective must be mlm+nsp, mlm+sop, mlm, rtd or minilm, got {self.objective!r}")
        self._check_minilm_options()
        rtd = {"generator_size": self.generator_size, "generator_layers": self.generator_layers,
               "discriminator_weight": self.discriminator_weight, "embedding_sharing": self.embedding_sharing}
        if self.embedding_sharing not in (None, "tied", "gdes"):
            raise BertmodelError(f"embedding-sharing must be tied or gdes, got {self.embedding_sharing!r}")
        given = [name for name, value in rtd.items() if value is not None]
        if given and self.objective != "rtd":
            raise BertmodelError(f"--{given[0].replace('_', '-')} shapes ELECTRA's replaced-token detection: add "
                                 "--objective rtd")
        for name in ("generator_size", "generator_layers"):
            value = rtd[name]
            if value is not None and not 0 < value <= 1:
                raise BertmodelError(f"{name.replace('_', '-')} must be above 0 and at most 1 (a fraction of the "
                                     f"discriminator's), got {value}")
        if self.discriminator_weight is not None and self.discriminator_weight <= 0:
            raise BertmodelError(f"discriminator-weight must be positive, got {self.discriminator_weight}")
        if self.new_rows_only_steps < 0:
            raise BertmodelError(f"new-rows-only-steps must be 0 or positive, got {self.new_rows_only_steps}")
        if self.new_rows_only_steps and not self.init_from:
            raise BertmodelError("--new-rows-only-steps trains the rows a grown vocabulary adds: it needs --init-from")
        if self.head_warmup_steps < 0:
            raise BertmodelError(f"head-warmup-steps must be 0 or positive, got {self.head_warmup_steps}")
        if self.head_warmup_steps and not self.init_from:
            raise BertmodelError("--head-warmup-steps holds a starting model's encoder while its head trains: it "
                                 "needs --init-from")
        if self.head_warmup_steps and self.new_rows_only_steps:
            raise BertmodelError("--head-warmup-steps and --new-rows-only-steps each train one part alone first; "
                                 "give one")
        if self.init_generator and (self.objective != "rtd" or not self.init_from):
            raise BertmodelError("--init-generator is the generator of the ELECTRA discriminator in --init-from: "
                                 "give both, with --objective rtd")
        if self.head_warmup_steps and self.objective == "rtd":
            raise BertmodelError("--head-warmup-steps trains an MLM head alone; --objective rtd has none to warm up")
        if self.eval_batches <= 0:
            raise BertmodelError(f"eval-batches must be positive, got {self.eval_batches}")
        if self.architecture not in (None, *ARCHITECTURES):
            raise BertmodelError(f"architecture must be {' or '.join(ARCHITECTURES)}, got {self.architecture!r}")
        if self.architecture is not None and not CONFIGS[self.architecture].has_pair_head \
                and self.objective in ("mlm+nsp", "mlm+sop"):
            raise BertmodelError(f"--objective {self.objective} needs a pair head, which the {self.architecture} "
                                 "architecture does not have (it is pre-trained with MLM alone): use --objective mlm "
                                 "or leave it out")
        if self.architecture == "roberta" and self.objective == "rtd":
            raise BertmodelError("--objective rtd trains ELECTRA's pair of models on the bert or modernbert "
                                 "architecture, not roberta")
        if self.init_from and any(v is not None for v in (self.layers, self.hidden, self.heads, self.intermediate)):
            raise BertmodelError("--init-from takes the model size from the checkpoint; drop the size options")
        if self.mask_rate_schedule is not None:
            if self.masking == "static":
                raise BertmodelError("--mask-rate-schedule masks rows afresh at each step's rate, and static shards "
                                     "have their masks baked in: add --masking dynamic")
            if self.mask_rate is not None:
                raise BertmodelError("--mask-rate and --mask-rate-schedule both set the rate; give one")
            self.mask_rates()
        if self.batch_size_warmup is not None:
            parse_batch_warmup(self.batch_size_warmup)
        if self.rope_theta is not None:
            if self.architecture in ("bert", "roberta") or (self.architecture is None and not self.init_from):
                named = "RoBERTa" if self.architecture == "roberta" else "BERT"
                raise BertmodelError(f"--rope-theta sets ModernBERT's rotary bases; {named} has learned absolute "
                                     "positions (use --architecture modernbert)")
            self.rope_thetas()

    def _check_minilm_options(self) -> None:
        given = [name for name in ("teacher_layer", "relation_heads") if getattr(self, name) is not None]
        if self.hidden_distill_weight:
            given.append("hidden_distill_weight")
        if self.objective == "minilm" and not self.teacher:
            raise BertmodelError("--objective minilm distils a teacher's self-attention relations: give --teacher DIR")
        if (self.teacher or given) and self.objective != "minilm":
            option = "teacher" if self.teacher else given[0]
            raise BertmodelError(f"--{option.replace('_', '-')} is for task-agnostic distillation: add --objective "
                                 "minilm")
        if self.teacher_layer is not None and self.teacher_layer < 1:
            raise BertmodelError(f"teacher-layer counts from 1, got {self.teacher_layer}")
        if self.relation_heads is not None and self.relation_heads < 1:
            raise BertmodelError(f"relation-heads must be at least 1, got {self.relation_heads}")
        if self.hidden_distill_weight < 0:
            raise BertmodelError(f"hidden-distill-weight must be 0 or positive, got {self.hidden_distill_weight}")

    def _check_schedule(self) -> None:
        """--decay-only is the wsd schedule with neither warmup nor stable phase: its fields
        are set here, so a run records (and a resume compares) the schedule itself."""
        if self.decay_only:
            if self.schedule == "poly":
                raise BertmodelError("--decay-only decays over the whole run with --decay-shape; drop --schedule poly")
            if self.warmup_steps:
                raise BertmodelError(f"--decay-only starts at the peak lr at step 0; drop --warmup-steps "
                                     f"{self.warmup_steps}")
            if self.decay_ratio not in (None, 1.0):
                raise BertmodelError(f"--decay-only decays over all of --max-steps; drop --decay-ratio "
                                     f"{self.decay_ratio:g}")
            self.schedule, self.warmup_steps, self.decay_ratio = "wsd", 0, 1.0
        super()._check_schedule()

    def mask_rates(self) -> MaskRateSchedule | None:
        return parse_mask_rate_schedule(self.mask_rate_schedule, self.max_steps) if self.mask_rate_schedule else None

    def rope_thetas(self) -> dict:
        """--rope-theta as config fields: global_rope_theta (and local_rope_theta)."""
        if self.rope_theta is None:
            return {}
        parts = str(self.rope_theta).replace("_", "").split(",")
        try:
            values = [float(v) for v in parts]
        except ValueError:
            values = []
        if len(parts) not in (1, 2) or len(values) != len(parts) or not all(v > 0 and math.isfinite(v)
                                                                             for v in values):
            raise BertmodelError(f"--rope-theta {self.rope_theta!r}: expected G or G,L, positive numbers "
                                 "(e.g. 160000 or 160000,10000)")
        return dict(zip(("global_rope_theta", "local_rope_theta"), values))

    task_name = "pretraining"  # what a run directory records (tasks' `name`)

    def read_paths(self) -> list[tuple[str, str | None]]:
        """What the run reads, which --out may not be or contain."""
        return ([("--data", p) for p in self.data] + [("--eval-data", p) for p in self.eval_data]
                + [("--init-from", self.init_from), ("--init-generator", self.init_generator),
                   ("--tokenizer", self.tokenizer), ("--teacher", self.teacher)])

    def meaningful_options(self) -> tuple[str, ...]:
        return (*super().meaningful_options(), "architecture", "masking", "mask_rate", "max_predictions", "objective",
                "mask_rate_schedule", "batch_size_warmup", "rope_theta", "generator_size", "generator_layers",
                "discriminator_weight", "embedding_sharing", "new_rows_only_steps", "head_warmup_steps", "teacher",
                "teacher_layer", "relation_heads", "hidden_distill_weight")

    def model_config(self, tokenizer) -> BertConfig | ModernBertConfig | RobertaConfig:
        """The model a fresh run builds: the preset of the architecture, the size
        overrides, and the tokenizer's vocabulary size and special ids."""
        architecture = self.architecture or "bert"
        return preset_config(architecture, self.preset or "base", num_hidden_layers=self.layers,
                             hidden_size=self.hidden, num_attention_heads=self.heads,
                             intermediate_size=self.intermediate, **vocabulary_ids(tokenizer, architecture),
                             **self.rope_thetas())


def train(cfg: TrainConfig, log=None) -> dict:
    """Pre-train (or resume) into cfg.out. Returns the last logged metrics."""
    from tqdm import tqdm

    task = {"rtd": RTDTask, "minilm": MiniLMTask}.get(cfg.objective, PretrainingTask)
    return run_training(cfg, lambda d, log: task(cfg, d, log), log or tqdm.write)
