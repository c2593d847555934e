"""Embedding distillation: our `bertmodel finetune embed --teacher` against
sentence-transformers' own recipe (SentenceTransformerTrainer + losses.MSELoss on the
teacher's precomputed embeddings), same teacher, student, texts, batch, lr, steps, max
length and seed, in one run, on the CPU.

Teacher: all-MiniLM-L6-v2 (../shared/tools/fetch_minilm.sh; a transformers BertModel
directory), written once as the sentence-transformers directory it is released as
(Transformer with max_seq_length 256 -> mean Pooling -> Normalize), which both sides read.
Student: `bertmodel shrink TEACHER --layers 0,2,4` (DistilBERT's initialisation: layers 0,
2 and 4 of 6, embeddings copied; it keeps the teacher's pooling and normalisation), the
same directory for both sides.

Training texts: sentences of the shared corpora (../shared/data: the Wikipedia extract,
WikiText-2's head, Google's sample text), split by bertprep's sentence splitter, 5 to 80
words, de-duplicated, shuffled with --seed, the first --texts of them: no SQuAD text.
Both sides: the teacher's vectors of every text (its own length, 256; batch 64), then one
epoch over them, AdamW lr --lr, eps 1e-6, weight decay 0.01 (not on biases/LayerNorm),
linear decay after 10% warmup, gradient clipping at 1.0, batch --batch-size, texts cut at
--max-length, fp32, the seed. Ours reads the texts as a text file (one per line); theirs
as a datasets column with the vectors as its label column (the recipe's `dataset.map`).

Evaluation: nDCG@10 (trec_eval's, bertmodel.metrics) of exact search on the test split of
the shared SQuAD head as `bertmodel squad-to-beir` splits it (questions over every
paragraph), for the teacher, the shrunk student before training, ours and theirs, each
read by bertmodel's embedder (`bertmodel evaluate`'s; it reads either side's export at its
own length: 256 tokens the teacher and the shrunk student, which keeps the teacher's
settings; --max-length the trained students), and its encode throughput: texts per second
of that search's encoding of the test corpus (583 paragraphs, batch 64; the questions,
encoded first, warm it up), at that length; and, like for like, every model's texts per
second on the same corpus at one length (--max-length), the faster of two passes.

Time: each side is one fresh process timed from its start to its exit: ours the whole
`bertmodel finetune embed --teacher` command (the teacher's vectors, training, the
export), theirs a script doing the same (this file with --theirs: the teacher's vectors,
training, `save`). Neither evaluates inside its process.

Prints: nDCG@10 ours - theirs in points (target >= -1) and the wall time ours / theirs
(target <= 0.8), beside every model's nDCG@10 and throughput.

Run:   .venv/bin/python benchmarks/bench_distill.py --work /tmp/bench-distill --json distill.json
                                    (the measured run: 313 steps a side; not yet run, estimated at
                                    20-40 minutes on 2 idle cores from the quick run's steps)
       .venv/bin/python benchmarks/bench_distill.py --quick --work /tmp/bench-distill
                                    (an end-to-end check: 4 minutes on 2 cores under a load of 4-5)
Needs: sentence-transformers, datasets and accelerate (the `retrieval` and `bench` extras),
../shared/data (squad, enwiki_wikiextractor, wikitext-2-raw-train-head.txt, google_sample_text.txt).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import random
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
DATA = SHARED / "data"
SQUAD = DATA / "squad" / "squad-v1.1-train-head.json"
CORPORA = (sorted((DATA / "enwiki_wikiextractor").glob("wiki_*")) + [DATA / "wikitext-2-raw-train-head.txt",
                                                                      DATA / "google_sample_text.txt"])
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_embed import minilm_dir  # noqa: E402

BERTMODEL = str(REPO / ".venv" / "bin" / "bertmodel") if (REPO / ".venv" / "bin" / "bertmodel").exists() \
    else "bertmodel"
TEACHER_LENGTH = 256  # all-MiniLM-L6-v2's max_seq_length
ENCODE_BATCH = 64


def paragraphs(path: pathlib.Path):
    """A corpus file's prose lines: not a WikiExtractor <doc> tag or title, not a WikiText heading."""
    title_next = False
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("<doc"):
            title_next = True
            continue
        if not line or line.startswith(("</doc", "=")) or title_next:
            title_next = False
            continue
        yield line


def training_texts(count: int, seed: int) -> list[str]:
    from bertprep.corpus import split_sentences

    seen, texts = set(), []
    for path in CORPORA:
        for paragraph in paragraphs(path):
            for sentence in split_sentences(paragraph):
                sentence = " ".join(sentence.split())
                if 5 <= len(sentence.split()) <= 80 and sentence not in seen:
                    seen.add(sentence)
                    texts.append(sentence)
    random.Random(seed).shuffle(texts)
    if len(texts) < count:
        raise SystemExit(f"the corpora hold {len(texts):,} sentences, fewer than --texts {count:,}")
    return texts[:count]


def teacher_dir(minilm: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """all-MiniLM-L6-v2 as its release reads: mean pooling, normalised, 256 tokens."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules.normalize import Normalize
    from sentence_transformers.base.modules.transformer import Transformer
    from sentence_transformers.sentence_transformer.modules.pooling import Pooling

    if not (out / "modules.json").is_file():
        transformer = Transformer(str(minilm), max_seq_length=TEACHER_LENGTH)
        pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
        SentenceTransformer(modules=[transformer, pooling, Normalize()], device="cpu").save(str(out))
    return out


def run(command: list[str], what: str) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{what} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def ours(args, teacher, student, texts, out) -> dict:
    seconds, _ = run([BERTMODEL, "finetune", "embed", "--model", student, "--teacher", teacher, "--train", texts,
                      "--batch-size", args.batch_size, "--epochs", "1", "--lr", args.lr, "--adam-eps", "1e-6",
                      "--weight-decay", "0.01", "--warmup-ratio", "0.1", "--max-query-length", args.max_length,
                      "--max-passage-length", args.max_length, "--eval-batch-size", ENCODE_BATCH, "--seed", args.seed,
                      "--device", "cpu", "--no-progress", "--out", out], "ours")
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    return {"seconds": seconds, "steps": last["step"], "loss": last.get("loss"), "model": out / "hf"}


def theirs(args) -> None:
    """The sentence-transformers side, in its own process: prints one JSON line."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer import losses
    from sentence_transformers.sentence_transformer.training_args import SentenceTransformerTrainingArguments

    texts = [line for line in pathlib.Path(args.texts_file).read_text(encoding="utf-8").splitlines() if line.strip()]
    teacher = SentenceTransformer(args.teacher, device="cpu")
    labels = teacher.encode(texts, batch_size=ENCODE_BATCH, convert_to_numpy=True)
    student = SentenceTransformer(args.student, device="cpu")
    student.max_seq_length = args.max_length
    train = Dataset.from_dict({"text": texts, "label": labels.tolist()})
    out = pathlib.Path(args.out)
    training = SentenceTransformerTrainingArguments(
        output_dir=str(out), num_train_epochs=1, per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr, warmup_ratio=0.1, lr_scheduler_type="linear", weight_decay=0.01, adam_epsilon=1e-6,
        max_grad_norm=1.0, seed=args.seed, data_seed=args.seed, save_strategy="no", logging_steps=50,
        report_to=[], use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
    trainer = SentenceTransformerTrainer(model=student, args=training, train_dataset=train,
                                         loss=losses.MSELoss(student))
    result = trainer.train()
    student.save(str(out / "final"))
    print(json.dumps({"steps": int(result.global_step), "loss": float(result.training_loss)}))


def their_run(args, teacher, student, texts, out) -> dict:
    seconds, stdout = run([sys.executable, __file__, "--theirs", "--teacher", teacher, "--student", student,
                           "--texts-file", texts, "--out", out, "--batch-size", args.batch_size, "--lr", args.lr,
                           "--max-length", args.max_length, "--seed", args.seed], "theirs")
    return {**json.loads(stdout.strip().splitlines()[-1]), "seconds": seconds, "model": out / "final"}


def score(model: pathlib.Path, test, length: int) -> dict:
    """nDCG@10 etc. of exact search over the test split, and encode throughput (texts/s)."""
    from bertmodel.metrics.ranking import ranking_metrics
    from bertmodel.retrieval.embedder import load_embedder
    from bertmodel.retrieval.search import dense_run

    embedder = load_embedder(model, batch_size=ENCODE_BATCH)
    timed = [0.0, 0]  # seconds, passages: the queries come first, the warm-up

    def passages(texts):
        start = time.perf_counter()
        vectors = embedder.encode_passages(texts)
        timed[0] += time.perf_counter() - start
        timed[1] += len(texts)
        return vectors

    metrics = ranking_metrics(dense_run(test, embedder.encode_queries, passages, k=100), test.qrels)
    metrics["texts_per_second"] = timed[1] / timed[0]
    metrics["max_length"] = int(embedder.settings["max_passage_length"])
    metrics["same_length_texts_per_second"] = same_length_rate(model, test, length)
    return metrics


def same_length_rate(model: pathlib.Path, test, length: int) -> float:
    """Texts per second encoding the test corpus at one length for every model (the
    like-for-like speed: the teacher reads 256 tokens, the trained students --max-length),
    the faster of two passes (the first warms up)."""
    from bertmodel.retrieval.embedder import load_embedder

    embedder = load_embedder(model, batch_size=ENCODE_BATCH, max_passage_length=length)
    texts = test.passage_texts()
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        embedder.encode_passages(texts)
        best = min(best, time.perf_counter() - start)
    return len(texts) / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for hidden in ("--teacher", "--student", "--texts-file", "--out"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--theirs", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--texts-count", type=int, default=20_000, help="Training sentences.")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--max-length", type=int, default=128, help="Tokens of a text the student reads.")
    parser.add_argument("--layers", default="0,2,4", help="The teacher's layers the student keeps.")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--queries", type=int, help="Evaluate on the first N test questions only.")
    parser.add_argument("--quick", action="store_true", help="An end-to-end check: 256 texts, batch 32, 100 "
                        "questions (figures meaningless).")
    parser.add_argument("--work", help="Where everything is written [default: a new temporary directory].")
    parser.add_argument("--json", help="Also write the results here.")
    args = parser.parse_args()
    if args.theirs:
        theirs(args)
        return
    if args.quick:
        args.texts_count, args.batch_size, args.queries = 256, 32, args.queries or 100
    if not SQUAD.is_file():
        raise SystemExit(f"{SQUAD} not found")
    from bertmodel.data.squad_beir import squad_collection
    from bertmodel.tasks.embed import first_queries

    root = pathlib.Path(args.work) if args.work else pathlib.Path(tempfile.mkdtemp(prefix="bench-distill-"))
    root.mkdir(parents=True, exist_ok=True)
    test = first_queries(squad_collection(SQUAD).split("test", str(SQUAD)), args.queries)
    texts = root / f"texts-{args.texts_count}-{args.seed}.txt"
    texts.write_text("\n".join(training_texts(args.texts_count, args.seed)) + "\n", encoding="utf-8")
    teacher = teacher_dir(minilm_dir(), root / "teacher")
    student = root / f"student-{args.layers.replace(',', '')}"
    if not (student / "config.json").is_file():
        run([BERTMODEL, "shrink", teacher, "--layers", args.layers, "--out", student], "shrink")
    stamp = time.strftime("%H%M%S")
    print(f"data: {args.texts_count:,} training sentences ({texts}); evaluated on {len(test.queries):,} test "
          f"questions over {len(test.corpus):,} passages; teacher {teacher}, student {student}", flush=True)
    mine = ours(args, teacher, student, texts, root / f"ours-{stamp}")
    them = their_run(args, teacher, student, texts, root / f"theirs-{stamp}")
    models = {"teacher (6 layers)": teacher, f"shrunk {args.layers}, before": student,
              "ours (finetune embed --teacher)": mine["model"], "theirs (SentenceTransformerTrainer)": them["model"]}
    scores = {}
    for name, path in models.items():
        scores[name] = score(path, test, args.max_length)
        m = scores[name]
        print(f"{name:38} nDCG@10 {m['ndcg@10']:.4f} MRR@10 {m['mrr@10']:.4f} R@100 {m['recall@100']:.4f} "
              f"encode {m['texts_per_second']:,.0f} texts/s (passages cut at {m['max_length']} tokens), "
              f"{m['same_length_texts_per_second']:,.0f} texts/s at {args.max_length} (every model)", flush=True)
    gap = (scores["ours (finetune embed --teacher)"]["ndcg@10"]
           - scores["theirs (SentenceTransformerTrainer)"]["ndcg@10"]) * 100
    ratio = mine["seconds"] / them["seconds"]
    print(f"wall time: ours {mine['seconds']:.1f}s ({mine['steps']} steps) | theirs {them['seconds']:.1f}s "
          f"({them['steps']} steps)", flush=True)
    print(f"nDCG@10 ours - theirs {gap:+.2f} points (target >= -1); time ours / theirs {ratio:.2f} (target <= 0.8)",
          flush=True)
    if args.json:
        result = {"texts": args.texts_count, "batch_size": args.batch_size, "lr": args.lr,
                  "max_length": args.max_length, "seed": args.seed, "scores": scores,
                  "ours": {k: str(v) for k, v in mine.items()}, "theirs": {k: str(v) for k, v in them.items()},
                  "ndcg_gap_points": gap, "time_ratio": ratio}
        pathlib.Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
