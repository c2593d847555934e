"""A mix of sources in build-shards (bertprep/corpus/mix.py): its sources measured on the
executor, one task per input (measuring reads every document, so the driver does not),
and what the pair tasks kept added up for the manifest and the summary line.
"""
from __future__ import annotations

from dataclasses import dataclass

from bertprep.corpus import CorpusSpec, MixPlan, measure_input, mix_inputs, plan_mix
from bertprep.executors import TaskCost


@dataclass(frozen=True)
class MeasureTask:
    """Before planning: the size of one input of a mix's source, per bucket of priority."""

    index: int
    corpus: CorpusSpec
    source: str
    path: str


def measure_source_input(task: MeasureTask) -> tuple[int, dict]:
    return task.index, measure_input(task.corpus, task.source, task.path)


def measure_mix(spec: CorpusSpec, executor, cost: TaskCost) -> MixPlan:
    """The mix's plan (shares, rates, copies, thresholds) from its measured inputs; the
    same as train-tokenizer computes, whatever the executor and its workers."""
    calls = [MeasureTask(i, spec, name, path) for i, (name, path) in enumerate(mix_inputs(spec))]
    found = dict(executor.map(measure_source_input, calls, cost))
    return plan_mix(spec, [found[i] for i in range(len(calls))])


def add_sampled(mix: MixPlan, parts) -> MixPlan:
    """What the pair tasks' pieces of a mix kept (their read counts), added to its plan."""
    for part in parts:
        if "source" in part:
            mix.add_kept(part["source"], part["sampled_size"], part["sampled_documents"])
    return mix
