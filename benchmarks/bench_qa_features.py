"""QA feature preparation: ours (bertmodel.data.qa_features) against a run_qa.py-style
reference, on the shared SQuAD training heads (3,807 v1.1 and 4,719 v2.0 questions).

The reference, written here and nowhere in the package, is what transformers'
`examples/pytorch/question-answering/run_qa.py` does in `prepare_train_features`: the
fast `BertTokenizer` over (question.lstrip(), context) with `truncation="only_second"`,
`return_overflowing_tokens`, `stride`, `return_offsets_mapping`, then its start/end
labelling loop over each window's offsets.

Strides: Google's `doc_stride` (ours) is the step between window starts; transformers'
`stride` is the number of tokens two windows overlap. With a window of
`L = max_seq_length - len(question) - 3` context tokens, the same windows need
`stride = L - doc_stride`, which depends on the question's length, so the reference
encodes the questions once to learn their lengths and makes one tokenizer call per
distinct length ("reference, Google windows"). run_qa.py itself makes one call with its
`--doc_stride 128` as the overlap (fewer windows, so less work); that call is timed as
well ("reference, one call") and the speed-up is reported against the faster of the two.

Every window is compared: the windows of each question, input_ids, token_type_ids and
the start/end labels. Each difference is printed with its cause.

Run: .venv/bin/python benchmarks/bench_qa_features.py [--repeats 3]
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO))

MAX_SEQ, DOC_STRIDE, MAX_QUERY = 384, 128, 64


def reference_features(hf_tokenizer, questions, contexts, answers, strides):
    """run_qa.py's prepare_train_features, one tokenizer call per distinct stride.
    Returns windows as (example, input_ids, token_type_ids, start, end, offsets)."""
    windows = []
    for stride in sorted(set(strides)):
        rows = [i for i, s in enumerate(strides) if s == stride]
        encoded = hf_tokenizer([questions[i].lstrip() for i in rows], [contexts[i] for i in rows],
                               truncation="only_second", max_length=MAX_SEQ, stride=stride,
                               return_overflowing_tokens=True, return_offsets_mapping=True, padding=False)
        for k, offsets in enumerate(encoded["offset_mapping"]):
            input_ids = encoded["input_ids"][k]
            cls_index = input_ids.index(hf_tokenizer.cls_token_id)
            sequence_ids = encoded.sequence_ids(k)
            example = rows[encoded["overflow_to_sample_mapping"][k]]
            answer = answers[example]
            if not answer:
                start = end = cls_index
            else:
                start_char, end_char = answer[1], answer[1] + len(answer[0])
                token_start = 0
                while sequence_ids[token_start] != 1:
                    token_start += 1
                token_end = len(input_ids) - 1
                while sequence_ids[token_end] != 1:
                    token_end -= 1
                if not (offsets[token_start][0] <= start_char and offsets[token_end][1] >= end_char):
                    start = end = cls_index
                else:
                    while token_start < len(offsets) and offsets[token_start][0] <= start_char:
                        token_start += 1
                    start = token_start - 1
                    while offsets[token_end][1] >= end_char:
                        token_end -= 1
                    end = token_end + 1
            windows.append((example, input_ids, encoded["token_type_ids"][k], start, end, offsets))
    windows.sort(key=lambda w: w[0])  # stable: each question's windows stay in order
    return windows


def google_strides(hf_tokenizer, questions):
    """transformers' overlap giving Google's windows: window length - doc_stride."""
    lengths = [min(len(ids), MAX_QUERY) for ids in
               hf_tokenizer([q.lstrip() for q in questions], add_special_tokens=False)["input_ids"]]
    return [MAX_SEQ - n - 3 - DOC_STRIDE for n in lengths], lengths


def compare(name, examples, ours, ref, hf_tokenizer) -> int:
    ours_by_example = {}
    for w, e in enumerate(ours.example_index.tolist()):
        ours_by_example.setdefault(e, []).append(w)
    ref_by_example = {}
    for window in ref:
        ref_by_example.setdefault(window[0], []).append(window)
    differences = 0
    for e, example in enumerate(examples):
        mine, theirs = ours_by_example.get(e, []), ref_by_example.get(e, [])
        if len(mine) != len(theirs):
            differences += 1
            print(f"  {example.id}: {len(mine)} windows, reference {len(theirs)}")
            continue
        for w, (_, ids, types, start, end, offsets) in zip(mine, theirs):
            win = ours.window(w)
            if win["input_ids"].tolist() != ids or win["token_type_ids"].tolist() != types:
                differences += 1
                print(f"  {example.id} window {w}: input_ids/token_type_ids differ")
                continue
            got = (int(ours.start_positions[w]), int(ours.end_positions[w]))
            if got != (start, end):
                differences += 1
                print(f"  {example.id} window {w}: labels {got}, reference {(start, end)}: "
                      f"{explain(example, win, got, (start, end), offsets)}")
    print(f"{name}: {len(examples):,} questions, {len(ours):,} windows (reference {len(ref):,}), "
          f"{differences} windows or questions differ")
    return differences


def explain(example, win, got, theirs, offsets) -> str:
    text, begin = example.answers[0]
    last_context = max(i for i, o in enumerate(win["offsets"][:, 0]) if o >= 0)
    if theirs[0] == last_context + 1:
        return ("run_qa's start loop runs past the window's last context token onto [SEP], whose "
                "offset (0, 0) is <= the answer's start: it labels [SEP] (start > end)")
    span = example.context[offsets[theirs[0]][0]:offsets[theirs[1]][1]] if theirs[0] else ""
    ours = example.context[win["offsets"][got[0], 0]:win["offsets"][got[1], 1]] if got[0] else ""
    return f"answer {text!r} at {begin}: ours covers {ours!r}, reference covers {span!r}"


def best_time(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each; the fastest counts")
    args = parser.parse_args()
    if not (SHARED_DATA / "squad").is_dir():
        sys.exit(f"skipped: {SHARED_DATA}/squad is absent")
    from transformers import AutoTokenizer

    from bertmodel.data.qa_features import prepare_qa_features
    from bertmodel.data.squad import read_squad
    from bertprep.tokenizer import load_tokenizer

    tok = load_tokenizer(SHARED_DATA / "bert-base-uncased-vocab.txt")
    with tempfile.TemporaryDirectory() as scratch:
        tok.save(scratch)
        hf_tokenizer = AutoTokenizer.from_pretrained(scratch)
    print(f"max_seq_length {MAX_SEQ}, doc_stride {DOC_STRIDE} (step; transformers stride = window - "
          f"{DOC_STRIDE}), max_query_length {MAX_QUERY}; best of {args.repeats}\n")
    total_differences = 0
    for name in ("squad-v1.1-train-head.json", "squad-v2.0-train-head.json"):
        examples = read_squad(SHARED_DATA / "squad" / name)
        questions = [e.question for e in examples]
        contexts = [e.context for e in examples]
        answers = [e.answers[0] if e.answers else None for e in examples]
        ours_s, ours = best_time(lambda: prepare_qa_features(examples, tok, MAX_SEQ, DOC_STRIDE, MAX_QUERY), args.repeats)

        def reference():
            strides, _ = google_strides(hf_tokenizer, questions)
            return reference_features(hf_tokenizer, questions, contexts, answers, strides)

        ref_s, ref = best_time(reference, args.repeats)
        # run_qa.py as usually run: one call, --doc_stride 128 taken as the overlap (fewer
        # windows than Google's step of 128, so less work for the reference).
        one_s, _ = best_time(lambda: reference_features(hf_tokenizer, questions, contexts, answers,
                                                        [DOC_STRIDE] * len(questions)), args.repeats)
        cut = sum(1 for e in examples if len(hf_tokenizer(e.question)["input_ids"]) - 2 > MAX_QUERY)
        total_differences += compare(name, examples, ours, ref, hf_tokenizer)
        baseline = min(ref_s, one_s)
        print(f"  questions over {MAX_QUERY} tokens (run_qa keeps them whole): {cut}")
        print(f"  ours {ours_s * 1000:,.0f} ms ({len(examples) / ours_s:,.0f} questions/s); reference, Google "
              f"windows {ref_s * 1000:,.0f} ms; reference, one call {one_s * 1000:,.0f} ms; "
              f"speed-up {baseline / ours_s:.1f}x\n")
    print(f"differences in all: {total_differences}")


if __name__ == "__main__":
    main()
