"""The pre-training task for ELECTRA's replaced-token detection (`--objective rtd`,
model/rtd.py): the pre-training task's data, recipe and checks (tasks/pretraining.py:
static or dynamic masks, any pairing of shards, their pair labels unused), with its own
model (a generator and a discriminator), statistics, FLOPs, held-out evaluation and export.

Per logging interval and evaluation: the generator's MLM loss and accuracy, the
discriminator's BCE, accuracy over real tokens, precision and recall on the replaced
ones, and the share of real tokens replaced (how often the generator's sample is not the
original: it falls as the generator learns, which is what makes the task harder).

Export: RUN/hf is the discriminator, the model the run is for (fine-tuning and
eval-suite read it), RUN/generator the generator:
  bert        RUN/hf ElectraForPreTraining, RUN/generator ElectraForMaskedLM
  modernbert  RUN/hf ModernBertForTokenClassification with one label ("replaced"): its
              encoder loads as ModernBertModel (AutoModel) and into every ModernBertFor...
              head; RUN/generator ModernBertForMaskedLM
"""
from __future__ import annotations

from pathlib import Path

import torch

from bertmodel.errors import BertmodelError
from bertmodel.hf import RTD_GENERATOR_DIR, check_export_dir, export_hf
from bertmodel.model.config import ModernBertConfig, config_from_dict
from bertmodel.model.rtd import (DEFAULT_DISCRIMINATOR_WEIGHT, DEFAULT_GENERATOR_SIZE, ReplacedTokenDetection,
                                 discriminator_config, discriminator_head_config, discriminator_state,
                                 generator_config, generator_state, generator_task, pair_classes)
from bertmodel.tasks.electra_start import pair_start
from bertmodel.tasks.pretraining import PretrainingTask
from bertmodel.training import parallel
from bertmodel.training.metrics import encoder_flops

GENERATOR_DIR = RTD_GENERATOR_DIR  # RUN/generator: the generator's transformers directory


def rtd_flops(config, generator, B: int, T: int, P: int, extent: dict | None = None) -> float:
    """Training FLOPs of one (B, T) micro-batch with P prediction slots a row: the generator
    (its last layer at the P slots, its head and decoder there; a ModernBERT generator's
    projected table), the discriminator (every token, its head at every token); sampling
    not counted. extent: an unpadded batch's tokens and attention pairs (metrics.py)."""
    g, V, H = generator, config.vocab_size, config.hidden_size
    E = getattr(g, "embedding_width", H)  # the shared tables' width
    extent = extent or {}
    tokens = extent.get("tokens", B * T)
    flops = encoder_flops(g, B, T, P, **extent) + encoder_flops(config, B, T, None, **extent)
    modern = isinstance(g, ModernBertConfig)
    head_in = g.hidden_size if modern else E  # ModernBERT's head: dense H_g -> H_g; ELECTRA's: H_g -> E
    flops += 6 * (g.hidden_size * head_in + head_in * V) * B * P  # generator head + decoder at the slots
    if g.hidden_size != E:  # the shared table read at the generator's width (ModernBERT: also multiplied out)
        flops += 6 * H * g.hidden_size * (tokens + (V if modern else 0))
    return flops + 6 * (H * H + H) * tokens  # the discriminator's head at every token


class RTDStats:
    """Sums over one logging interval's micro-batches, on the device (no syncs)."""

    FIELDS = ("loss", "mlm_loss", "disc_loss", "mlm_correct", "mlm_total", "disc_correct", "real_tokens",
              "true_replaced", "predicted_replaced", "replaced")

    def __init__(self, device: torch.device):
        self.sums = torch.zeros(len(self.FIELDS), dtype=torch.float64, device=device)
        self.micro_batches = 0

    @torch.no_grad()
    def add(self, out, tensors: dict) -> None:
        labels = tensors["masked_lm_labels"]
        valid = labels != -100
        mask = tensors.get("attention_mask")
        real = torch.ones_like(out.replaced) if mask is None else mask.bool()
        predicted = (out.disc_logits > 0) & real
        replaced = out.replaced & real
        parts = (out.loss, out.mlm_loss, out.disc_loss, ((out.mlm_logits.argmax(-1) == labels) & valid).sum(),
                 valid.sum(), ((predicted == replaced) & real).sum(), real.sum(), (predicted & replaced).sum(),
                 predicted.sum(), replaced.sum())
        self.sums += torch.stack([p.detach().double() for p in parts])
        self.micro_batches += 1

    def totals(self) -> torch.Tensor:
        extra = torch.tensor([self.micro_batches], dtype=torch.float64, device=self.sums.device)
        return torch.cat([self.sums, extra])

    @classmethod
    def summarize(cls, totals: torch.Tensor) -> dict:
        values = totals.tolist()
        s = dict(zip(cls.FIELDS, values))
        n = max(1.0, values[-1])
        share = lambda a, b: s[a] / s[b] if s[b] else float("nan")  # noqa: E731 - nan: nothing to measure
        return {"loss": s["loss"] / n, "mlm_loss": s["mlm_loss"] / n, "disc_loss": s["disc_loss"] / n,
                "mlm_acc": share("mlm_correct", "mlm_total"), "disc_acc": share("disc_correct", "real_tokens"),
                "disc_precision": share("true_replaced", "predicted_replaced"),
                "disc_recall": share("true_replaced", "replaced"), "replaced_share": share("replaced", "real_tokens")}

    def reset(self) -> None:
        self.sums.zero_()
        self.micro_batches = 0


class RTDTask(PretrainingTask):
    def __init__(self, cfg, d: parallel.Dist, log):
        super().__init__(cfg, d, log)
        # --init-from a trained pair (tasks/electra_start.py): its two models, as they are.
        self.start = None
        if cfg.init_from:
            shaped = [f"--{n}" for n, v in (("generator-size", cfg.generator_size),
                                            ("generator-layers", cfg.generator_layers)) if v is not None]
            if shaped:
                raise BertmodelError(f"{shaped[0]} shapes a new generator; the one of {cfg.init_from} keeps its "
                                     "size, so drop it")
            if self.growth is not None:
                raise BertmodelError("--objective rtd from a trained pair keeps its vocabulary; build the shards "
                                     f"with {cfg.init_from}'s own tokenizer")
            self.start = pair_start(cfg.init_from, self.init, cfg.init_generator, cfg.embedding_sharing)
        self.generator_size = cfg.generator_size or DEFAULT_GENERATOR_SIZE
        self.generator_layers = cfg.generator_layers or 1.0
        self.discriminator_weight = (DEFAULT_DISCRIMINATOR_WEIGHT if cfg.discriminator_weight is None
                                     else cfg.discriminator_weight)
        self.embedding_sharing = self.start.sharing if self.start else cfg.embedding_sharing or "tied"
        wanted = self._wanted_config()
        self.architecture, self.generator_class = (cls.hf_architecture for cls in pair_classes(wanted))
        self.hf_config = discriminator_head_config(wanted)
        if d.is_main:
            check_export_dir(Path(cfg.out) / GENERATOR_DIR)  # refused now, not at the first save
        self.generator = None  # its config, once the model is built

    def _wanted_config(self):
        if getattr(self, "start", None) is not None:
            return discriminator_config(self.start.config)
        return discriminator_config(self.cfg.model_config(self.tokenizer))

    def _build(self, config, generator) -> ReplacedTokenDetection:
        self._check_positions(config)
        self.generator = generator
        model = ReplacedTokenDetection(config, generator, self.discriminator_weight, self.embedding_sharing)
        g = generator
        sharing = {"tied": "embeddings shared", "gdes": "token table shared gradient-disentangled (DeBERTaV3)"}
        self.log(f"replaced-token detection: generator {g.num_hidden_layers} layers, hidden {g.hidden_size}, "
                 f"{g.num_attention_heads} heads, intermediate {g.intermediate_size} "
                 f"(x{g.hidden_size / config.hidden_size:.3g} of the discriminator's width), "
                 f"{sharing[self.embedding_sharing]}; "
                 f"loss = MLM + {self.discriminator_weight:g} x BCE; "
                 f"exports RUN/hf ({self.architecture}: the discriminator"
                 f"{', whose encoder loads as ModernBertModel' if isinstance(config, ModernBertConfig) else ''}) "
                 f"and RUN/{GENERATOR_DIR} ({self.generator_class})")
        return model

    def fresh_model(self, log):
        config = self._wanted_config()
        if self.start is None:
            return self._build(config, generator_config(config, self.generator_size, self.generator_layers))
        self.checked_source(log)  # the discriminator against the shards: vocabulary, tokenizer, positions
        model = self._build(config, self.start.generator)
        log(self.start.load(model))
        return model

    def model_for_checkpoint(self, resume: dict):
        task = self.own_checkpoint_task(resume, "rtd", "replaced-token detection")
        config = config_from_dict(resume["config"])
        generator = config_from_dict(task["generator_config"])
        if self.start is not None:  # a run started from a pair: its models are the pair's
            return self._resumed(resume, config, generator)
        self._check_same_model(config, (resume.get("train") or {}).get("init_from"))
        # The generator's shape and the tables' layout are the model's: checked here, before
        # the weights are loaded into a model built from today's options.
        sharing = task.get("embedding_sharing", "tied")
        if sharing != self.embedding_sharing:
            raise BertmodelError(f"{self.cfg.out}: an ELECTRA run with --embedding-sharing {sharing}, not "
                                 f"{self.embedding_sharing}; resume it with --embedding-sharing {sharing}")
        wanted = generator_config(config, self.generator_size, self.generator_layers)
        shape = lambda g: (g.num_hidden_layers, g.hidden_size, g.num_attention_heads, g.intermediate_size)  # noqa: E731
        if shape(wanted) != shape(generator):
            raise BertmodelError(f"{self.cfg.out}: its generator has {generator.num_hidden_layers} layers, hidden "
                                 f"{generator.hidden_size}, not {wanted.num_hidden_layers} layers, hidden "
                                 f"{wanted.hidden_size}; resume with the run's --generator-size and --generator-layers")
        model = self._build(config, generator)
        model.load_state_dict(resume["model"])
        return model

    def _resumed(self, resume: dict, config, generator) -> ReplacedTokenDetection:
        model = self._build(config, generator)
        model.load_state_dict(resume["model"])
        return model

    def new_stats(self, device: torch.device) -> RTDStats:
        return RTDStats(device)

    def flops(self, config, tensors: dict, extent: dict | None = None) -> float:
        B, T = tensors["input_ids"].shape
        return rtd_flops(config, self.generator, B, T, tensors["masked_lm_positions"].shape[1], extent)

    @torch.no_grad()
    def evaluate(self, model, d: parallel.Dist, autocast, on_batch=None) -> dict:
        """The figures of training on the first eval_batches batches of the held-out shards
        (their static masks; each_held_out_batch), dropout off; the generator samples from
        a seeded stream of its own, the same at every evaluation and apart from training's."""
        stats = RTDStats(d.device)
        noise = torch.Generator(device=d.device).manual_seed(self.cfg.seed * 1000 + d.rank)

        def score(batch: dict) -> None:
            with autocast:
                out = model(**batch, sample_generator=noise)
            stats.add(out, batch)

        self.each_held_out_batch(model, d, score, on_batch)
        summary = stats.summarize(parallel.all_reduce_sum(stats.totals(), d))
        return {f"eval_{k}": v for k, v in summary.items()}

    def state(self) -> dict:
        generator = self.generator.to_dict() if self.generator is not None else None
        return {"name": self.name, "architecture": self.architecture, "objective": "rtd", "masking": self.cfg.masking,
                "generator_config": generator, "generator_architecture": self.generator_class,
                "discriminator_weight": self.discriminator_weight, "embedding_sharing": self.embedding_sharing,
                "hf_config": self.hf_config}

    def export(self, source, run: Path, config) -> None:
        """RUN/hf (the discriminator) and RUN/generator, from the model or a checkpoint's dict."""
        state_dict = source.state_dict() if isinstance(source, torch.nn.Module) else source["model"]
        task = self.state()
        export_hf({"model": discriminator_state(state_dict), "config": config.to_dict(), "task": task},
                  run / "hf", tokenizer=self.tokenizer)
        export_hf({"model": generator_state(state_dict), "config": self.generator.to_dict(),
                   "task": generator_task(task)}, run / GENERATOR_DIR, tokenizer=self.tokenizer)
