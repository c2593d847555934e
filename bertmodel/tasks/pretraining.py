"""The pre-training task: masked LM + a sentence-pair objective (NSP or SOP), or masked
LM alone, on bertprep shards.

It owns what the generic loop must not know: opening and checking the shard
directories, the recipe (static or dynamic masks, data/recipes.py, and their rate's
schedule; the objective the shards can serve; a batch-size warmup, data/schedules.py),
the model (a preset, --init-from any BERT, or a checkpoint to
resume), MLM/pair statistics, the FLOP count of a (B, T, P) batch, held-out MLM/pair
accuracy (always on the held-out shards' own static masks, so recipes compare alike),
and the transformers class the run exports as (BertForPreTraining, or BertForMaskedLM
for MLM alone; ModernBertForMaskedLM, RobertaForMaskedLM: those architectures have no
pair head).
"""
from __future__ import annotations

import dataclasses

import torch

from bertmodel.training import parallel
from bertmodel.model.config import CONFIGS, BertConfig, ModernBertConfig, config_from_dict, preset_config
from bertmodel.data import ShardDataset, eval_batches
from bertmodel.data.recipes import (DEFAULT_OBJECTIVE, PAIRING_WORDS, DynamicMasking, default_max_predictions,
                                    masking_vocabulary, objective_for, pairing_of_dir)
from bertmodel.data.schedules import BatchSchedule, parse_batch_warmup
from bertmodel.data.shards import open_shard_dir
from bertmodel.errors import BertmodelError
from bertmodel.hf import UnsupportedModel, load_pretrained
from bertmodel.training.metrics import StepStats, train_flops
from bertmodel.model import HEADS, head_class
from bertmodel.tasks.vocab_growth import plan_growth
from bertmodel.tasks.warm_start import check_source, head_warmup, source_objective, start_from
from bertmodel.training.run_dir import source_identity
from bertprep.instances import MaskingConfig


# The pair objective's name in metrics (nsp_acc, sop_loss, ...) and the pairing whose
# labels it learns; MLM alone has neither.
PAIR_METRIC = {objective: pairs for pairs, objective in DEFAULT_OBJECTIVE.items() if objective != "mlm"}


class PretrainingStats(StepStats):
    """MLM and pair-head sums per logging interval, fed from the batch's tensors. The pair
    figures are named for the objective (nsp_loss/nsp_acc, sop_loss/sop_acc); with
    `pair` None (MLM alone, or held-out rows of another pairing) there are none."""

    def __init__(self, device, pair: str | None = "nsp"):
        super().__init__(device)
        self.pair = pair

    def add(self, out, tensors: dict) -> None:  # type: ignore[override]
        super().add(out, tensors["masked_lm_labels"], tensors["next_sentence_label"])

    def summarize(self, totals):  # type: ignore[override]
        summary = StepStats.summarize(totals)
        loss, acc = summary.pop("nsp_loss"), summary.pop("nsp_acc")
        if self.pair is not None:
            summary[f"{self.pair}_loss"], summary[f"{self.pair}_acc"] = loss, acc
        return summary


class PretrainingTask:
    name = "pretraining"
    best_metric = None  # pre-training exports its latest weights, not a "best" one

    def __init__(self, cfg, d: parallel.Dist, log):
        self.cfg, self.d, self.log = cfg, d, log
        self.notes: list[str] = []  # what the run says about its data once every check passed
        self.shards = self._open(cfg.data)
        self.tokenizer = self.shards.tokenizer
        self.init = self._load_init(cfg.init_from) if cfg.init_from else None
        # A tokenizer that extends the checkpoint's grows its vocabulary (tasks/vocab_growth.py).
        self.growth = plan_growth(self.init, self.tokenizer, cfg.init_from) if self.init is not None else None
        if getattr(cfg, "new_rows_only_steps", None) and self.growth is None:
            raise BertmodelError("--new-rows-only-steps trains the rows a grown vocabulary adds; give --init-from a "
                                 "model whose tokenizer the shards' tokenizer extends (bertprep extend-tokenizer)")
        kind = self.init.config.architecture if self.init is not None else cfg.architecture or "bert"
        if self.init is not None and cfg.architecture not in (None, kind):
            raise BertmodelError(f"--architecture {cfg.architecture} conflicts with {cfg.init_from}, a {kind} model; "
                                 "--init-from brings its architecture, so drop --architecture")
        if cfg.rope_theta is not None and kind != "modernbert":
            raise BertmodelError(f"--rope-theta sets ModernBERT's rotary bases; {cfg.init_from} is a {kind} model "
                                 "with learned absolute positions")
        if not CONFIGS[kind].has_pair_head:
            # MLM alone, from any shards: a pair row is read as one sequence (its segment
            # ids ignored: ModernBERT has no segment embeddings, RoBERTa one type).
            self.objective = objective_for(cfg.objective or "mlm", self.shards.dirs)
            pairs = {pairing_of_dir(d) for d in self.shards.dirs} - {"none"}
            if pairs and cfg.objective is None:
                held = " and ".join(PAIRING_WORDS[k] for k in sorted(pairs))
                # Said once the run's start-up checks pass (training/run.py): a refused
                # resume stays one line.
                self.notes.append(f"the shards hold {held}; the {kind} architecture has no pair head: MLM alone, "
                                  "each pair read as one sequence")
        else:
            # From a source without a pair head, MLM alone: the run exports its class.
            implied = None if cfg.objective else source_objective(self.init)
            self.objective = objective_for(cfg.objective or implied, self.shards.dirs)
            pairs = {pairing_of_dir(d) for d in self.shards.dirs} - {"none"}
            if implied and pairs:
                held = " and ".join(PAIRING_WORDS[k] for k in sorted(pairs))
                pair = " or ".join(DEFAULT_OBJECTIVE[k] for k in sorted(pairs))
                fresh = f"--objective {pair} adds a fresh one" if "pretraining" in HEADS[self.init.config.model_type] \
                    else f"{self.init.config.model_type} models have none"
                self.notes.append(f"{cfg.init_from} has no pair head: MLM alone on the shards' {held}, their labels "
                                  f"unused ({fresh})")
        if self.init is not None:
            check_source(self.init, self.objective)
        # (rtd builds its own pair of models: tasks/rtd.py, minilm a plain encoder: tasks/minilm.py;
        # the MLM class stands in until then).
        # A starting model keeps its class names (XLM-R's model_type "xlm-roberta", ELECTRA's "electra").
        heads_of = self.init.config if self.init is not None else kind
        self.model_class = head_class(heads_of, "pretraining" if self.objective in PAIR_METRIC else "mlm")
        self.architecture = self.model_class.hf_architecture
        self.mask_rates = cfg.mask_rates()
        self.train_set = self.shards if cfg.masking == "static" else self._dynamic(self.shards)
        if not self.tokenizer.files:
            # Without tokenizer files RUN/hf would carry none, and AutoTokenizer would
            # then silently map every word to [UNK].
            raise BertmodelError(f"{cfg.data[0]}: the shards carry no tokenizer files (vocab.txt or "
                                 "tokenizer.json); pass --tokenizer with the one they were built with")
        self.eval_data = self._open(cfg.eval_data) if cfg.eval_data else None
        if self.eval_data is not None and (diff := self.eval_data.tokenizer.same_as(self.tokenizer)):
            raise BertmodelError(f"--eval-data uses another tokenizer than --data ({diff})")
        self.pair = PAIR_METRIC.get(self.objective)
        # The pair head is scored on held-out rows of its own pairing only: an SOP head
        # read against NSP labels (or any head against FULL-SENTENCES rows, which have
        # none) measures nothing. MLM is measured the same way on any held-out shards.
        self.eval_pair = self.pair
        if self.eval_data is not None and self.pair is not None:
            kinds = {pairing_of_dir(d) for d in self.eval_data.dirs}  # a mix is fine: MLM only
            if kinds != {self.pair}:
                self.eval_pair = None
                held = " and ".join(PAIRING_WORDS[k] for k in sorted(kinds))
                log(f"--eval-data holds {held} and the run trains {self.objective}: held-out figures are MLM only")

    def _dynamic(self, shards: ShardDataset) -> DynamicMasking:
        options = shards.dirs[0].manifest.get("options", {})
        shard_rate = options.get("masked_lm_prob", 0.15)
        rates = self.mask_rates
        rate = self.cfg.mask_rate or shard_rate
        # A schedule's cap fits its highest rate: the prediction slots keep one width all run.
        cap = self.cfg.max_predictions or default_max_predictions(shards.max_predictions, shard_rate,
                                                                  rates.max_rate if rates else rate)
        config = MaskingConfig(cap, rate, bool(options.get("whole_word_mask", False)),
                               bool(options.get("random_from_whole_vocab", False)))
        if config.whole_word_mask and self.tokenizer.kind != "wordpiece":
            # WordPiece's words follow from its "##" pieces; other kinds' from the
            # pre-tokenizer, which build-shards applied to the text and the rows do not keep.
            raise BertmodelError(f"{shards.dirs[0].path}: whole-word masks of a {self.tokenizer.kind} tokenizer "
                                 "need each token's word, which shards do not keep; train on the shards' own "
                                 "masks (--masking static)")
        what = f"rate {rates.describe()}" if rates else f"{rate:g} of tokens"
        self.log(f"dynamic masking: {what}; at most {cap} per row"
                 f"{', whole words' if config.whole_word_mask else ''}; objective {self.objective}")
        return DynamicMasking(shards, self.cfg.seed, config, masking_vocabulary(self.tokenizer), rates)

    def batch_schedule(self) -> BatchSchedule | None:
        """The global batch per step under --batch-size-warmup (a warmup in tokens counts
        each sample as the shards' sequence length), or None."""
        cfg = self.cfg
        if cfg.batch_size_warmup is None:
            return None
        unit = cfg.grad_accum * self.d.world
        length = self.shards.max_seq_length
        schedule = BatchSchedule.build(parse_batch_warmup(cfg.batch_size_warmup), cfg.batch_size * unit, unit, length)
        self.log(schedule.describe(length))
        return schedule

    def step_metrics(self, step: int) -> dict:
        """What metrics.jsonl records of optimizer step `step` (0-based) beyond the loss:
        the mask rate under a schedule."""
        return {"mask_rate": self.mask_rates(step)} if self.mask_rates else {}

    @property
    def has_eval(self) -> bool:
        return self.eval_data is not None

    def _open(self, dirs) -> ShardDataset:
        cfg, d = self.cfg, self.d
        return ShardDataset([open_shard_dir(p, verify=cfg.verify, rank=d.rank, world=d.world, tokenizer=cfg.tokenizer)
                             for p in dirs])

    # -- the model -------------------------------------------------------------------
    def _check_positions(self, config: BertConfig) -> None:
        for data in (self.shards, self.eval_data):
            if data is not None and data.max_seq_length > config.max_sequence_length:
                raise BertmodelError(f"shards hold sequences of {data.max_seq_length} tokens but the model has "
                                     f"{config.max_sequence_length} positions")

    def _wanted_config(self) -> BertConfig | ModernBertConfig:
        return self.cfg.model_config(self.tokenizer)

    def own_checkpoint_task(self, resume: dict, objective: str, what: str) -> dict:
        """The checkpoint's task entry, once it is a run of `objective` (a subclass's: rtd,
        minilm); a run of another objective is refused in one line naming `what` it is."""
        task = resume.get("task") or {}
        if task.get("objective") != objective:
            raise BertmodelError(f"{self.cfg.out}: a {task.get('objective', 'mlm+nsp')} run; {what} starts a run of "
                                 "its own: use another --out")
        return task

    def model_for_checkpoint(self, resume: dict):
        if (resume.get("task") or {}).get("objective") == "rtd":
            raise BertmodelError(f"{self.cfg.out}: an ELECTRA run (generator and discriminator); resume it with "
                                 "--objective rtd")
        if (resume.get("task") or {}).get("objective") == "minilm":
            raise BertmodelError(f"{self.cfg.out}: a distilled plain encoder (--objective minilm); resume it with "
                                 "--objective minilm and its --teacher")
        config = config_from_dict(resume["config"])
        if not self.cfg.init_from:
            self._check_same_model(config, (resume.get("train") or {}).get("init_from"))
        self._check_positions(config)
        model = self.model_class(config)
        model.load_state_dict(resume["model"])
        return model

    def _check_same_model(self, config, started_from: str | None) -> None:
        """A resume without --init-from builds the model from the options: they must
        give the run's own (its architecture first, then its size). A run started with
        --init-from (a context extension) took its model from there, so it needs it again."""
        out = self.cfg.out
        held = f"a {config.architecture} model"
        shape = f"{config.num_hidden_layers} layers, hidden {config.hidden_size}"
        if started_from:
            raise BertmodelError(f"{out}: a run started with --init-from {started_from} (it holds {held}, {shape}); "
                                 "resume it with the same --init-from")
        wanted = self._wanted_config()
        if wanted.architecture != config.architecture:
            raise BertmodelError(f"{out}: holds {held} ({shape}), not {wanted.architecture}; use another --out, or "
                                 f"resume with --architecture {config.architecture}")
        if wanted == config:
            return
        if (wanted.num_hidden_layers, wanted.hidden_size) != (config.num_hidden_layers, config.hidden_size):
            other = f"one of {wanted.num_hidden_layers} layers, hidden {wanted.hidden_size}"
        else:  # the same depth and width: name the fields that differ
            saved, now = config.to_dict(), wanted.to_dict()
            fields = [k for k in now if k in saved and saved[k] != now[k]]
            other = "one with " + ", ".join(f"{k} {now[k]}" for k in fields) + \
                    " (the run's: " + ", ".join(f"{saved[k]}" for k in fields) + ")"
        raise BertmodelError(f"{out}: holds {held} ({shape}), not {other}; use another --out or the run's size "
                             "options")

    def fresh_model(self, log):
        cfg, tok = self.cfg, self.tokenizer
        if not cfg.init_from:
            config = self._wanted_config()
            self._check_positions(config)
            return self.model_class(config)
        pre = self.checked_source(log)
        config = pre.config
        if cfg.rope_theta is not None:  # context extension: the same weights, a new RoPE base
            config = dataclasses.replace(config, **cfg.rope_thetas())
            log(f"RoPE theta: global {pre.config.global_rope_theta:,g} -> {config.global_rope_theta:,g}, local "
                f"{pre.config.local_rope_theta:,g} -> {config.local_rope_theta:,g}")
        model = self.model_class(config)
        log(start_from(model, pre, getattr(cfg, "head_warmup_steps", 0)))
        return model

    def checked_source(self, log):
        """The --init-from model (its vocabulary grown where the shards' tokenizer extends
        its own), checked against the options and the shards: its size, vocabulary,
        tokenizer and positions."""
        cfg, tok = self.cfg, self.tokenizer
        pre = self.init
        if self.growth is not None:
            pre = self.growth.grow(pre)
            log(self.growth.describe())
        if cfg.preset is not None:
            wanted = preset_config(pre.config.architecture, cfg.preset, vocab_size=pre.config.vocab_size)
            shape = (pre.config.num_hidden_layers, pre.config.hidden_size, pre.config.num_attention_heads)
            preset = (wanted.num_hidden_layers, wanted.hidden_size, wanted.num_attention_heads)
            if preset != shape:
                raise BertmodelError(f"--preset {cfg.preset} ({'/'.join(map(str, preset))}) conflicts "
                                     f"with {cfg.init_from} ({'/'.join(map(str, shape))}); --init-from takes the "
                                     "model size from the checkpoint, so drop --preset")
        if pre.config.vocab_size != tok.vocab_size:
            raise BertmodelError(f"{cfg.init_from}: vocab size {pre.config.vocab_size:,} but the shards' tokenizer has "
                                 f"{tok.vocab_size:,}; use shards built with the model's tokenizer")
        if pre.tokenizer is None:
            log(f"warning: {cfg.init_from} has no tokenizer files (vocab.txt or tokenizer.json); only the vocab "
                "size could be checked against the shards'")
        elif diff := pre.tokenizer.same_as(tok):
            # Same size, other tokens (another BPE of 50,368 entries): every id would mean
            # another piece to the model than to the shards.
            raise BertmodelError(f"{cfg.init_from}: its tokenizer is not the one {cfg.data[0]} was built with "
                                 f"({diff}); use shards built with the model's tokenizer")
        self._check_positions(pre.config)
        return pre

    @staticmethod
    def _load_init(path):
        try:
            return load_pretrained(path)
        except UnsupportedModel as exc:
            trained = ", ".join(CONFIGS)
            raise BertmodelError(f"{exc.path}: is a {exc.model_type} model; pretrain trains {trained} (and electra) "
                                 "models") from None

    def partial_steps(self, model):
        """--new-rows-only-steps: the first steps train a grown vocabulary's new rows alone;
        --head-warmup-steps: the head alone (tasks/warm_start.py)."""
        steps = getattr(self.cfg, "new_rows_only_steps", None)
        if steps:
            return self.growth.new_rows_only(model, steps)
        head_steps = getattr(self.cfg, "head_warmup_steps", 0)
        return head_warmup(model, head_steps) if head_steps else None

    # -- what the loop asks per step -----------------------------------------------------
    def new_stats(self, device: torch.device) -> PretrainingStats:
        return PretrainingStats(device, self.pair)

    def flops(self, config: BertConfig, tensors: dict, extent: dict | None = None) -> float:
        B, T = tensors["input_ids"].shape
        return train_flops(config, B, T, tensors["masked_lm_positions"].shape[1], pair_head=self.objective != "mlm",
                           **(extent or {}))

    @torch.no_grad()
    def evaluate(self, model, d: parallel.Dist, autocast, on_batch=None) -> dict:
        """MLM and pair-head accuracy (and losses) on the first eval_batches batches of
        the held-out shards (each_held_out_batch). Held-out rows of another pairing than
        the objective's give MLM figures only, and eval_loss is then the MLM loss."""
        stats = PretrainingStats(d.device, self.eval_pair)

        def score(batch: dict) -> None:
            labels = batch.pop("next_sentence_label")
            with autocast:  # without pair labels the model's loss is the MLM loss alone
                out = model(**batch, **({"next_sentence_label": labels} if self.eval_pair else {}))
            if self.eval_pair is None:
                out = out._replace(nsp_logits=None)  # nothing of the pair head is counted
            stats.add(out, {**batch, "next_sentence_label": labels})

        self.each_held_out_batch(model, d, score, on_batch)
        summary = stats.summarize(parallel.all_reduce_sum(stats.totals(), d))
        return {f"eval_{k}": v for k, v in summary.items()}

    def each_held_out_batch(self, model, d: parallel.Dist, score, on_batch=None) -> None:
        """score(batch) for each of the first eval_batches batches of the held-out shards
        (on the device), the model in eval mode (dropout off) and given back as it was: the
        plain module (no DDP hooks, no compiled shapes to add). on_batch(done, total):
        called with 0 first and after each batch, as many times on every rank (it may raise)."""
        was_training = model.training
        model.eval()
        # What eval_batches yields per rank (a rank whose share of a tiny set is empty gets one fewer).
        total = min(self.cfg.eval_batches, max(1, len(self.eval_data) // (self.cfg.batch_size * d.world)))
        done = 0
        try:
            if on_batch is not None:
                on_batch(0, total)
            for arrays in eval_batches(self.eval_data, self.cfg.batch_size, d.rank, d.world, self.cfg.eval_batches,
                                       model.config.max_sequence_length):
                score({k: torch.from_numpy(v).to(d.device) for k, v in arrays.items()})
                done += 1
                if on_batch is not None:
                    on_batch(done, total)
            if on_batch is not None and done < total:
                on_batch(total, total)  # the same number of calls (collectives) on every rank
        finally:
            model.train(was_training)

    def inputs(self) -> dict:
        """The shard directories this run reads, each by its manifest's sha256 (the manifest
        lists every shard's sha256, the options and the seed), compared on resume."""
        return {option: [source_identity(d.path / "manifest.json") | {"source": str(d.path)} for d in data.dirs]
                for option, data in (("data", self.shards), ("eval_data", self.eval_data)) if data is not None}

    def state(self) -> dict:
        return {"name": self.name, "architecture": self.architecture, "objective": self.objective,
                "masking": self.cfg.masking}
