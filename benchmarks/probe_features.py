"""What a pre-trained encoder's frozen features know about NSMC sentiment, read three ways:
the last layer's [CLS] vector, the mean of the last layer over the real tokens, and the
mean of the embedding layer's output. Each is fed to a logistic regression trained on the
first --train-rows of NSMC's training rows and scored on the 5,000 dev reviews
(benchmarks/transfer_korean.py's split), beside the same model's shape with random
weights (seed 0). No weight of the encoder moves: where a reading beats the random init,
pre-training put the signal there; where [CLS] trails it while the means lead, the
classifier's pooling, not the pre-training, is what a fine-tune from [CLS] must overcome.

Models: checkpoints or run directories of `bertmodel pretrain` (exported once to
transformers with `bertmodel export-hf`), or transformers directories.

  python benchmarks/probe_features.py --work /tmp/tk RUN/checkpoints/step-9000 ADAPTED/checkpoints/step-1500

Needs scikit-learn (the test extra) and ../shared/data/korean.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from transfer_korean import nsmc_split, read_split  # noqa: E402

READINGS = ("cls", "mean", "embedding mean")


def transformers_dir(model: Path, work: Path) -> Path:
    """A transformers directory of `model`: itself, or its export (made once)."""
    if (model / "config.json").is_file():
        return model
    out = work / "probe-exports" / "-".join(model.resolve().parts[-3:])
    if not (out / "config.json").is_file():
        subprocess.run([sys.executable, "-m", "bertmodel.cli", "export-hf", str(model), str(out)], check=True,
                       stdout=subprocess.DEVNULL)
    return out


def features(encoder, tokenizer, texts: list[str], max_length: int):
    """(cls, mean, embedding mean) as numpy arrays, one row per text."""
    import torch

    readings = [[] for _ in READINGS]
    with torch.no_grad():
        for i in range(0, len(texts), 256):
            batch = tokenizer(texts[i:i + 256], padding=True, truncation=True, max_length=max_length,
                              return_tensors="pt")
            if encoder.config.model_type == "modernbert":  # it has no segment embeddings
                batch.pop("token_type_ids", None)
            out = encoder(**batch, output_hidden_states=True)
            real = batch["attention_mask"].unsqueeze(-1).to(out.last_hidden_state.dtype)
            mean = lambda h: (h * real).sum(1) / real.sum(1)  # noqa: E731
            for kept, value in zip(readings, (out.last_hidden_state[:, 0], mean(out.last_hidden_state),
                                              mean(out.hidden_states[0]))):
                kept.append(value)
    return [torch.cat(r).double().numpy() for r in readings]


def probe(x_train, y_train, x_dev, y_dev) -> float:
    """Dev accuracy of a logistic regression on standardised features."""
    from sklearn.linear_model import LogisticRegression

    mu, sd = x_train.mean(0), x_train.std(0) + 1e-6
    classifier = LogisticRegression(C=1.0, max_iter=5000).fit((x_train - mu) / sd, y_train)
    return classifier.score((x_dev - mu) / sd, y_dev)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bertmodel-transfer-korean"))
    ap.add_argument("--train-rows", type=int, default=2000)
    ap.add_argument("--max-seq-length", type=int, default=96)
    args = ap.parse_args()
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    torch.set_grad_enabled(False)
    train, dev, _, _ = nsmc_split(args.work, args.train_rows)
    (x_train, y_train), (x_dev, y_dev) = read_split(train), read_split(dev)
    directories = [transformers_dir(m, args.work) for m in args.models]
    tokenizer = AutoTokenizer.from_pretrained(directories[0])
    encoders = {str(m): AutoModel.from_pretrained(d) for m, d in zip(args.models, directories)}
    torch.manual_seed(0)  # here: loading may draw (a head it lacks), and the random init must not depend on it
    encoders[f"random init ({args.models[0]}'s shape, seed 0)"] = AutoModel.from_config(
        AutoConfig.from_pretrained(directories[0]))
    print(f"NSMC: {len(x_train):,} training reviews, {len(x_dev):,} dev; logistic regression on frozen features; "
          f"dev accuracy by reading ({', '.join(READINGS)})", flush=True)
    for name, encoder in encoders.items():
        encoder.eval()
        train_features = features(encoder, tokenizer, x_train, args.max_seq_length)
        dev_features = features(encoder, tokenizer, x_dev, args.max_seq_length)
        scores = [probe(a, y_train, b, y_dev) for a, b in zip(train_features, dev_features)]
        print(f"{name}: " + ", ".join(f"{reading} {score:.4f}" for reading, score in zip(READINGS, scores)),
              flush=True)


if __name__ == "__main__":
    main()
