"""The pre-training task: masked LM + next sentence prediction on bertprep shards.

It owns what the generic loop must not know: opening and checking the shard
directories, the model (a preset, --init-from any BERT, or a checkpoint to resume),
MLM/NSP statistics, the FLOP count of a (B, T, P) batch, held-out MLM/NSP accuracy, and
the transformers class the run exports as (BertForPreTraining).
"""
from __future__ import annotations

import torch

from bertmodel import parallel
from bertmodel.config import BertConfig
from bertmodel.data import ShardDataset, eval_batches
from bertmodel.data.shards import open_shard_dir
from bertmodel.errors import BertmodelError
from bertmodel.hf import load_into, load_pretrained
from bertmodel.metrics import StepStats, train_flops
from bertmodel.model import BertForPreTraining


class PretrainingStats(StepStats):
    """MLM/NSP sums per logging interval, fed from the batch's tensors."""

    def add(self, out, tensors: dict) -> None:  # type: ignore[override]
        super().add(out, tensors["masked_lm_labels"], tensors["next_sentence_label"])


class PretrainingTask:
    name = "pretraining"
    architecture = "BertForPreTraining"
    best_metric = None  # pre-training exports its latest weights, not a "best" one

    def __init__(self, cfg, d: parallel.Dist, log):
        self.cfg, self.d, self.log = cfg, d, log
        self.train_set = self._open(cfg.data)
        self.tokenizer = self.train_set.tokenizer
        if not self.tokenizer.files:
            # Without tokenizer files RUN/hf would carry none, and AutoTokenizer would
            # then silently map every word to [UNK].
            raise BertmodelError(f"{cfg.data[0]}: the shards carry no tokenizer files (vocab.txt or "
                                 "tokenizer.json); pass --tokenizer with the one they were built with")
        self.eval_data = self._open(cfg.eval_data) if cfg.eval_data else None
        if self.eval_data is not None and (diff := self.eval_data.tokenizer.same_as(self.tokenizer)):
            raise BertmodelError(f"--eval-data uses another tokenizer than --data ({diff})")

    @property
    def has_eval(self) -> bool:
        return self.eval_data is not None

    def _open(self, dirs) -> ShardDataset:
        cfg, d = self.cfg, self.d
        return ShardDataset([open_shard_dir(p, verify=cfg.verify, rank=d.rank, world=d.world, tokenizer=cfg.tokenizer)
                             for p in dirs])

    # -- the model -------------------------------------------------------------------
    def _check_positions(self, config: BertConfig) -> None:
        for data in (self.train_set, self.eval_data):
            if data is not None and data.max_seq_length > config.max_position_embeddings:
                raise BertmodelError(f"shards hold sequences of {data.max_seq_length} tokens but the model has "
                                     f"{config.max_position_embeddings} positions")

    def _wanted_config(self) -> BertConfig:
        tok = self.tokenizer
        return self.cfg.model_config(tok.vocab_size, tok.special_ids.get("pad", 0))

    def model_for_checkpoint(self, resume: dict) -> BertForPreTraining:
        config = BertConfig.from_dict(resume["config"])
        if not self.cfg.init_from and self._wanted_config() != config:
            raise BertmodelError(f"{self.cfg.out} holds checkpoints of another model ({config.num_hidden_layers} "
                                 f"layers, hidden {config.hidden_size}); use another --out or the same size options")
        self._check_positions(config)
        model = BertForPreTraining(config)
        model.load_state_dict(resume["model"])
        return model

    def fresh_model(self, log) -> BertForPreTraining:
        cfg, tok = self.cfg, self.tokenizer
        if not cfg.init_from:
            config = self._wanted_config()
            self._check_positions(config)
            return BertForPreTraining(config)
        pre = load_pretrained(cfg.init_from)
        if cfg.preset is not None:
            from bertmodel.config import PRESETS

            shape = (pre.config.num_hidden_layers, pre.config.hidden_size, pre.config.num_attention_heads)
            if PRESETS[cfg.preset] != shape:
                raise BertmodelError(f"--preset {cfg.preset} ({'/'.join(map(str, PRESETS[cfg.preset]))}) conflicts "
                                     f"with {cfg.init_from} ({'/'.join(map(str, shape))}); --init-from takes the "
                                     "model size from the checkpoint, so drop --preset")
        if pre.config.vocab_size != tok.vocab_size:
            raise BertmodelError(f"{cfg.init_from}: vocab size {pre.config.vocab_size:,} but the shards' tokenizer has "
                                 f"{tok.vocab_size:,}; use shards built with the model's tokenizer")
        if pre.tokenizer is None:
            log(f"warning: {cfg.init_from} has no tokenizer files (vocab.txt or tokenizer.json); only the vocab "
                "size could be checked against the shards'")
        elif diff := pre.tokenizer.same_as(tok):
            raise BertmodelError(f"{cfg.init_from}: its tokenizer differs from the shards' ({diff})")
        self._check_positions(pre.config)
        model = BertForPreTraining(pre.config)
        for note in load_into(model, pre):
            log(note)
        log(f"initialised from {pre.source} ({pre.architecture})")
        return model

    # -- what the loop asks per step -----------------------------------------------------
    def new_stats(self, device: torch.device) -> PretrainingStats:
        return PretrainingStats(device)

    def flops(self, config: BertConfig, tensors: dict) -> float:
        B, T = tensors["input_ids"].shape
        return train_flops(config, B, T, tensors["masked_lm_positions"].shape[1])

    @torch.no_grad()
    def evaluate(self, model, d: parallel.Dist, autocast) -> dict:
        """MLM and NSP accuracy (and losses) on the first eval_batches batches of the
        held-out shards, dropout off, on the plain module (no DDP hooks, no compiled
        shapes to add)."""
        was_training = model.training
        model.eval()
        stats = PretrainingStats(d.device)
        for arrays in eval_batches(self.eval_data, self.cfg.batch_size, d.rank, d.world, self.cfg.eval_batches,
                                   model.config.max_position_embeddings):
            batch = {k: torch.from_numpy(v).to(d.device) for k, v in arrays.items()}
            with autocast:
                out = model(**batch)
            stats.add(out, batch)
        model.train(was_training)
        summary = stats.summarize(parallel.all_reduce_sum(stats.totals(), d))
        return {f"eval_{k}": v for k, v in summary.items()}

    def state(self) -> dict:
        return {"name": self.name, "architecture": self.architecture}
