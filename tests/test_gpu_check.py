"""benchmarks/gpu_check.py is the one command a session with a GPU runs (and has minutes
of device time for): its every mode must work before it gets there. `--cpu-smoke` runs
the same code on the CPU with the tiny preset: padded and unpadded (the jagged kernel a
GPU takes), the real pretrain loop (also with ELECTRA's --objective rtd), the table and
the ratios; then ModernBERT's rows at
1,024 tokens, padded and unpadded."""
from __future__ import annotations

import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))

import gpu_check  # noqa: E402


def test_the_gpu_check_runs_every_mode_and_prints_its_ratios(capsys):
    assert gpu_check.main(["--cpu-smoke"]) == 0
    out = capsys.readouterr().out
    losses = dict(re.findall(r"\(tiny bf16, (eager, \w+)[^:]*: .*?; loss ([\d.]+) ->", out))
    assert set(losses) == {"eager, padded", "eager, unpadded"}, out
    # Same seed, same batches: the unpadded step computes the padded one's loss (bf16).
    assert abs(float(losses["eager, padded"]) - float(losses["eager, unpadded"])) < 0.02, out
    assert "finite: False" not in out
    assert "eager, unpadded (jagged)" in out  # the kernel a GPU takes, not the CPU's repad
    table = {line.split("  ")[0].strip() for line in out.splitlines() if "samples/s" in line and "target" in line
             and not line.startswith("tiny")}
    modern = {"ModernBERT 1024, eager, padded", "ModernBERT 1024, eager, unpadded"}
    assert table == {"eager, padded", "eager, unpadded", "pretrain loop", "pretrain loop, ELECTRA rtd"} | modern, out
    assert re.search(r"^rtd/mlm\+nsp loop step time: \d+\.\d\dx$", out, re.M), out
    assert re.search(r"^unpadded/padded step time, eager: \d+\.\d\dx$", out, re.M), out
    assert re.search(r"tokens/s", out)
    check_modernbert_rows(out)


def check_modernbert_rows(out: str) -> None:
    """ModernBERT-tiny at 1,024 tokens, padded and unpadded, in the same run."""
    losses = dict(re.findall(r"\(tiny bf16, ModernBERT 1024, (eager, \w+)[^:]*: .*?; loss ([\d.]+) ->", out))
    assert set(losses) == {"eager, padded", "eager, unpadded"}, out
    # The same model and batches: packed, it computes the padded step's loss (bf16).
    assert abs(float(losses["eager, padded"]) - float(losses["eager, unpadded"])) < 0.02, out
    assert "finite: False" not in out
    # ModernBERT has no target of its own: its rows must not be judged by BERT-base's.
    rows = [line for line in out.splitlines() if line.startswith("ModernBERT 1024, eager")]
    assert rows and all(line.endswith("no target set") for line in rows), out
    assert "ModernBERT-tiny bf16, batch 2 x 1024" in out
    assert re.search(r"^ModernBERT 1024, unpadded/padded step time, eager: \d+\.\d\dx$", out, re.M), out
