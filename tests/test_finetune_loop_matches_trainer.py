"""The whole fine-tuning loop against transformers' Trainer itself: `finetune tokens`
(our data path, packed encoder, AdamW groups, warmup and linear decay, clipping at 1.0)
and `Trainer.train()` over run_ner's data path, from the same weights (the head too), on
the same batches in the same order, dropout off so nothing random is drawn. The lr and
the loss of every step are the same, warmup included; the heads' step-by-step tests
(tests/head_steps.py) check the model and optimizer alone, without the loop."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertmodel.data.loader import SampleOrder
from bertmodel.data.tagged import read_tagged
from bertmodel.finetune import FinetuneConfig, finetune
from bertmodel.tasks.tokens import TagSet
from shared_data import SHARED_DATA

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # the Trainer needs it

CONLL = SHARED_DATA / "ner" / "conll2003"
CASED_VOCAB = SHARED_DATA / "bert-base-cased-vocab.txt"
ROWS, BATCH, LR, SEED = 80, 8, 2e-3, 3
STEPS, WARMUP = ROWS // BATCH, 2  # finetune's --warmup-ratio 0.2 of 10 steps


@pytest.mark.slow
@pytest.mark.skipif(not CONLL.is_dir() or not CASED_VOCAB.is_file(),
                    reason=f"the shared NER data and vocabularies are not at {SHARED_DATA}")
def test_finetune_tokens_steps_as_the_trainer(tmp_path):
    data = read_tagged(CONLL / "train.txt").head(ROWS)
    tags = TagSet.from_data(data).tags
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"tokens": w, "tags": t}) + "\n" for w, t in zip(data.words, data.tags)))

    # One starting point for both: a small BERT with its head, as a transformers dir with
    # our tag order (so finetune keeps the head), dropout off.
    tok = transformers.BertTokenizer(vocab=str(CASED_VOCAB), do_lower_case=False)
    config = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                     id2label=dict(enumerate(tags)), label2id={t: i for i, t in enumerate(tags)})
    torch.manual_seed(0)
    start = tmp_path / "start"
    transformers.BertForTokenClassification(config).save_pretrained(start)
    tok.save_pretrained(start)

    # Ours: the library call `finetune tokens` makes.
    out = tmp_path / "ours"
    finetune(FinetuneConfig(task="tokens", model=str(start), train=str(train), out=str(out), epochs=1,
                            batch_size=BATCH, lr=LR, warmup_ratio=WARMUP / STEPS, weight_decay=0.01, clip_grad=1.0,
                            max_seq_length=64, seed=SEED, device="cpu", progress=False, log_every=1),
             log=lambda *a, **k: None)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    ours = [(r["lr"], r["loss"]) for r in records if "loss" in r]

    # The Trainer, on run_ner's encoding (first piece labelled), in our sample order.
    ids = {t: i for i, t in enumerate(tags)}
    enc = tok(data.words, is_split_into_words=True, truncation=True, max_length=64)
    rows = []
    for i, sentence_tags in enumerate(data.tags):
        labels, previous = [], None
        for word in enc.word_ids(i):
            labels.append(-100 if word is None or word == previous else ids[sentence_tags[word]])
            previous = word
        rows.append({**{k: enc[k][i] for k in enc}, "labels": labels})
    order = SampleOrder(ROWS, SEED).take(0, ROWS).tolist()

    class InOurOrder(transformers.Trainer):
        def _get_train_sampler(self, train_dataset=None):
            return order

    seen = []

    class Record(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
            seen.append([optimizer.param_groups[0]["lr"], None])

        def on_log(self, args, state, control, logs=None, **kwargs):
            if "loss" in logs:
                seen[-1][1] = logs["loss"]

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "trainer"), num_train_epochs=1, per_device_train_batch_size=BATCH,
        learning_rate=LR, warmup_steps=WARMUP, weight_decay=0.01, max_grad_norm=1.0, adam_epsilon=1e-6,
        lr_scheduler_type="linear", seed=SEED, save_strategy="no", eval_strategy="no", logging_strategy="steps",
        logging_steps=1, report_to="none", use_cpu=True, disable_tqdm=True, dataloader_num_workers=0)
    net = transformers.BertForTokenClassification.from_pretrained(start)
    InOurOrder(model=net, args=args, train_dataset=rows, callbacks=[Record()],
               data_collator=transformers.DataCollatorForTokenClassification(tok)).train()

    assert len(ours) == len(seen) == STEPS
    lrs = np.array([[a[0], b[0]] for a, b in zip(ours, seen)])
    assert lrs[0].tolist() == [0.0, 0.0]  # warmup starts at 0 on both sides
    np.testing.assert_allclose(lrs[:, 0], lrs[:, 1], rtol=1e-6, atol=0)
    losses = np.array([[a[1], b[1]] for a, b in zip(ours, seen)])
    # fp32 on both sides, the same operations through other kernels: they round apart, and
    # AdamW amplifies that (up to 6e-5 in 8 steps on one CPU, tests/head_steps.py; 1e-7
    # here on another). The bound sits well above that and well below what a real
    # difference moves the loss by: the warmup one step ahead, as it was, moved it by
    # 0.07-0.13 from step 1 on.
    np.testing.assert_allclose(losses[:, 0], losses[:, 1], atol=1e-3, rtol=0)
    assert losses[-1, 0] < losses[0, 0] - 0.1  # it learnt: not two idle runs compared
