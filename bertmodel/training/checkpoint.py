"""Checkpoints: RUN/checkpoints/step-N/, written atomically, pruned to the last K (never
the best model's while it is the best); RUN/best.json, which says which step that is.

A checkpoint is a plain dict saved with `torch.save` (and loaded with weights_only=True):
  model      state dict of the unwrapped module (transformers' names, no _orig_mod. or
             module. prefix; the tied decoder entries share storage with the embeddings)
  optimizer  optimizer.state_dict()
  scheduler  {"step": N} (the schedule is a pure function of the step, see optim.py)
  rng        python / numpy / torch / cuda generator states
  data       {"cursor": global samples consumed, "seed": data order seed}
  config     BertConfig.to_dict();  train  the TrainConfig as a dict;  step  N
  best       {"step", "metric", "value"[, "eval_loss"]} of the best model so far (fine-tuning) or None
  interval   the logging interval's sums so far (training/loop.py), so the first line
             logged after a resume covers the whole interval
  eval_pending  True when a stop cut this step's evaluation short (it runs first on resume)
plus tokenizer/ (the shards' tokenizer files, so a checkpoint is self-contained) and
meta.json (step and the size of state.pt), written last.

Writing: everything goes to checkpoints/.tmp-step-N-PID/, which is renamed to step-N/
when complete; then older checkpoints are pruned to the newest keep_last, except the
one of the best step (state["best"]), which stays while it is the best: a fine-tuning
run keeps its latest and its best checkpoint by default. Loading considers only step-N/
directories whose meta.json exists and whose state.pt has the recorded size, so a
checkpoint cut short by a crash (or a leftover .tmp directory) is never loaded.
choose_from_run picks the one `bertmodel export-hf` exports from a run.
"""
from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import torch

from bertmodel.errors import BertmodelError

STEP_DIR = re.compile(r"^step-(\d+)$")
STATE_FILE = "state.pt"
FULL_DISK_BYTES = 1 << 20  # less free space than this after a failed write: the disk is full
META_FILE = "meta.json"
BEST_FILE = "best.json"  # RUN/best.json: the step and metric of the best model (the one in RUN/hf)


def rng_state() -> dict:
    np_state = np.random.get_state(legacy=False)
    state = {
        "python": random.getstate(),
        "numpy": {"bit_generator": np_state["bit_generator"], "key": torch.from_numpy(np_state["state"]["key"].copy()),
                  "pos": int(np_state["state"]["pos"]), "has_gauss": int(np_state["has_gauss"]),
                  "gauss": float(np_state["gauss"])},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        # This process's device only: get_rng_state_all() would create a context on
        # every visible GPU from every rank.
        state["cuda"] = torch.cuda.get_rng_state(torch.cuda.current_device())
    return state


def set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state({"bit_generator": n["bit_generator"], "state": {"key": n["key"].numpy(), "pos": n["pos"]},
                         "has_gauss": n["has_gauss"], "gauss": n["gauss"]})
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"], torch.cuda.current_device())


def unwrap_state_dict(state_dict: dict) -> dict:
    """Strip the prefixes torch.compile (_orig_mod.) and DDP (module.) add."""
    out = {}
    for k, v in state_dict.items():
        while k.startswith(("_orig_mod.", "module.")):
            k = k.split(".", 1)[1]
        out[k] = v
    return out


def list_checkpoints(run_dir) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / "checkpoints"
    found = []
    if not root.is_dir():
        return found
    for d in root.iterdir():
        m = STEP_DIR.match(d.name)
        if not m or not d.is_dir():
            continue
        if not is_complete(d):
            warnings.warn(f"{d} is incomplete (no meta.json or a short state.pt); ignoring it", stacklevel=2)
            continue
        found.append((int(m.group(1)), d))
    return sorted(found)


def is_complete(ckpt_dir: Path) -> bool:
    try:
        meta = json.loads((ckpt_dir / META_FILE).read_text())
        return (ckpt_dir / STATE_FILE).stat().st_size == meta["state_bytes"]
    except (OSError, ValueError, KeyError):
        return False


def latest_checkpoint(run_dir) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def save_checkpoint(run_dir, state: dict, tokenizer_files: dict[str, Path] | None = None,
                    keep_last: int | None = None) -> Path:
    """Write RUN/checkpoints/step-{state['step']}/ atomically; prune to the last keep_last."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    step = int(state["step"])
    final = root / f"step-{step}"
    tmp = root / f".tmp-step-{step}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        tmp.mkdir()
        torch.save(state, tmp / STATE_FILE)
        if tokenizer_files:
            (tmp / "tokenizer").mkdir()
            for name, path in tokenizer_files.items():
                shutil.copyfile(path, tmp / "tokenizer" / name)
        _fsync(tmp / STATE_FILE)
        meta = {"step": step, "state_bytes": (tmp / STATE_FILE).stat().st_size,
                "cursor": state.get("data", {}).get("cursor")}
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2))
    except BaseException as exc:
        full = is_disk_full(root, exc)
        shutil.rmtree(tmp, ignore_errors=True)  # never leave half a checkpoint behind
        if full:
            last = latest_checkpoint(run_dir)
            kept = f"{last} is the latest complete checkpoint" if last else "no checkpoint was written yet"
            raise BertmodelError(f"{root}: disk full while saving step-{step}; {kept}; free space and rerun "
                                 "the same command to resume") from None
        raise
    if final.exists():  # the same step saved again (e.g. SIGTERM right after a scheduled save):
        # set the old copy aside first, so a kill at any moment leaves one complete step-N.
        old = root / f".old-step-{step}-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    if keep_last:
        prune(run_dir, keep_last, best_step=(state.get("best") or {}).get("step"))
    for stale in [*root.glob(".tmp-step-*"), *root.glob(".old-step-*")]:  # leftovers of killed runs of this RUN dir
        if stale != tmp and not _pid_alive(stale.name.rsplit("-", 1)[-1]):
            shutil.rmtree(stale, ignore_errors=True)
    return final


def prune(run_dir, keep_last: int, best_step: int | None = None) -> None:
    """Delete all but the newest keep_last checkpoints, never the best step's."""
    for step, old in list_checkpoints(run_dir)[:-keep_last]:
        if step != best_step:
            shutil.rmtree(old, ignore_errors=True)


def read_best(run_dir) -> dict | None:
    """RUN/best.json ({"step", "metric", "value", ...}), or None when the run keeps no best model."""
    path = Path(run_dir) / BEST_FILE
    if not path.is_file():
        return None
    try:
        best = json.loads(path.read_text())
        int(best["step"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BertmodelError(f"{path}: cannot be read ({exc})") from None
    return best


def write_best(run_dir, best: dict) -> None:
    tmp = Path(run_dir) / f".{BEST_FILE}.tmp"
    tmp.write_text(json.dumps(best, indent=2) + "\n")
    tmp.replace(Path(run_dir) / BEST_FILE)


def is_run_dir(path: Path) -> bool:
    """A RUN dir of ours (checkpoints/ and no config.json), as load_pretrained reads it."""
    return (path / "checkpoints").is_dir() and not (path / "config.json").is_file()


def choose_from_run(run: Path, which: str | None = None, step: int | None = None) -> tuple[Path, int, str]:
    """The model of a RUN dir to export: (directory to load, its step, what it is in words).

    which "best": the best model by the run's --metric-for-best (RUN/best.json), from its
    checkpoint or, when that step was evaluated between checkpoints, from RUN/hf (which
    holds it; it is what `evaluate` and `predict` use); "latest": the latest checkpoint;
    step: checkpoints/step-N. Default: best where the run keeps one (fine-tuning with
    validation data), else latest."""
    best = read_best(run)
    kept = list_checkpoints(run)
    if step is not None:
        found = dict(kept).get(step)
        if found is None:
            steps = ", ".join(str(s) for s, _ in kept) or "none"
            hint = f"; --best exports the best model (step {best['step']:,})" if best else ""
            raise BertmodelError(f"{run}: no checkpoint of step {step:,} (kept: {steps}){hint}")
        return found, step, "as asked" + (f"; the best by {best['metric']} is step {best['step']:,}"
                                          if best and best["step"] != step else "")
    which = which or ("best" if best else "latest")
    latest = kept[-1] if kept else None
    if which == "latest":
        if latest is None:
            raise BertmodelError(f"{run}: a run directory without a complete checkpoint")
        other = (f"; the best by {best['metric']} is step {best['step']:,} (--best)"
                 if best and best["step"] != latest[0] else "")
        return latest[1], latest[0], "the latest checkpoint" + other
    if best is None:
        raise BertmodelError(f"{run}: no best model (no {run / 'best.json'}: a pre-training run, or one not "
                             "evaluated yet); use --latest or --step N")
    step = int(best["step"])
    source = dict(kept).get(step) or run / "hf"
    if source == run / "hf" and not (source / "config.json").is_file():
        raise BertmodelError(f"{run}: the best model (step {step:,}) has neither a checkpoint nor {source}; "
                             "use --latest or --step N")
    other = f"; --latest exports step {latest[0]:,}" if latest and latest[0] != step else ""
    return source, step, f"the best by {best['metric']} {best['value']:.4f}" + other


def load_checkpoint(ckpt_dir) -> dict:
    ckpt_dir = Path(ckpt_dir)
    if not is_complete(ckpt_dir):
        raise BertmodelError(f"{ckpt_dir}: not a complete checkpoint (no meta.json or a short {STATE_FILE})")
    try:
        state = torch.load(ckpt_dir / STATE_FILE, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a corrupt file to the user
        raise BertmodelError(f"{ckpt_dir / STATE_FILE}: cannot be read ({str(exc).splitlines()[0]})") from None
    state["model"] = unwrap_state_dict(state["model"])
    return state


def is_disk_full(directory: Path, exc: BaseException) -> bool:
    """Whether a failed write ran out of space. torch.save reports a full disk as a
    RuntimeError ("unexpected pos ..."), so look at the free space too (before the
    partial file is removed)."""
    if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
        return True
    if not isinstance(exc, (OSError, RuntimeError)):
        return False
    try:
        return shutil.disk_usage(directory).free < FULL_DISK_BYTES
    except OSError:
        return False


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _pid_alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
        return True
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
