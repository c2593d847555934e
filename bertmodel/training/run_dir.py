"""What a run directory is, what it holds, and what it was trained on.

A directory is one of our runs only by its own record: RUN/run.json (the task and the
architecture, written when a run starts) or, for runs made before run.json existed,
complete checkpoints under RUN/checkpoints/. Anything else that is not empty (a folder
that merely holds an `hf/` or a `metrics.jsonl`) is the user's, and a run refuses it:
a run replaces RUN/hf/ and rewrites metrics.jsonl, so taking such a folder for a run
would destroy the user's files.

A run also never writes where it reads: --out may not equal or contain the model it
starts from or the data it reads.

Each checkpoint records the run's inputs (`inputs`: files and saved datasets by the
sha256 of their bytes and the split read, hub datasets by name, config and split,
columns, the label set, the shard manifests' sha256), and a resume
compares them with the data given now: a resume on other data is refused, naming what
changed, unless --allow-changed-options asks to continue (logged). The label set of a
classifier can never change on resume: the trained head's classes are its indices.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from bertmodel.training import checkpoint as ckpt
from bertmodel.errors import BertmodelError
from bertprep.errors import check_parent_is_directory

RUN_FILE = "run.json"
LOCK_FILE = ".lock"
TASK_WORDS = {"pretraining": "a pre-training run", "classification": "a classification fine-tuning run",
              "qa": "a question-answering fine-tuning run",
              "token_classification": "a token-classification fine-tuning run",
              "multiple_choice": "a multiple-choice fine-tuning run"}


# -- the run's own record ------------------------------------------------------------------

def read_run_record(run: Path) -> dict | None:
    path = run / RUN_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BertmodelError(f"{path}: cannot be read ({exc}); it is this run's record") from None
    if not isinstance(record, dict) or not isinstance(record.get("task"), str):
        raise BertmodelError(f"{path}: not a run record (no \"task\"); choose a new --out")
    return record


def write_run_record(run: Path, task: str, architecture: str) -> None:
    from bertmodel import __version__

    tmp = run / f".{RUN_FILE}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps({"task": task, "architecture": architecture, "bertmodel": __version__},
                              indent=2) + "\n", encoding="utf-8")
    tmp.replace(run / RUN_FILE)


def describe_run(task: str | None) -> str:
    return TASK_WORDS.get(task or "", f"a {task} run" if task else "a run")


def check_run_dir(run: Path, task: str) -> None:
    """RUN is new, empty, or one of our runs of the same task (then the run resumes):
    never someone's files, never another task's run."""
    check_parent_is_directory(run)
    if run.exists() and not run.is_dir():
        raise BertmodelError(f"{run}: exists and is a file, not a run directory")
    if not run.is_dir() or not any(p.name != LOCK_FILE for p in run.iterdir()):
        return
    record = read_run_record(run)
    if record is None and not ckpt.list_checkpoints(run):
        raise BertmodelError(f"{run}: exists and is not a run directory (no {RUN_FILE} or checkpoints); choose a "
                             "new or empty --out")
    if record is not None and record["task"] != task:
        raise BertmodelError(f"{run}: holds {describe_run(record['task'])} ({record.get('architecture', '?')}), "
                             f"not {describe_run(task)}; choose a new --out")


def check_task_of_checkpoint(run: Path, resume: dict, task: str) -> None:
    """The same check for runs without run.json, from their latest checkpoint's record."""
    saved = (resume.get("task") or {}).get("name")
    if saved is not None and saved != task:
        raise BertmodelError(f"{run}: holds {describe_run(saved)} ({resume['task'].get('architecture', '?')}), "
                             f"not {describe_run(task)}; choose a new --out")


def check_out_apart(run: Path, reads: list[tuple[str, str | None]]) -> None:
    """--out must not be, or contain, anything the run reads (the model it starts from,
    its data): a run replaces RUN/hf/ and writes checkpoints there."""
    out = run.resolve()
    for option, path in reads:
        if not path:
            continue
        read = Path(path).resolve()
        if read == out or out in read.parents:
            where = "is" if read == out else "holds"
            raise BertmodelError(f"{run}: --out {where} the {option} this run reads ({path}); a run writes "
                                 "checkpoints and hf/ into --out, so choose another --out")
        if read.is_dir() and read in out.parents:  # its checkpoints would change the data's own bytes
            raise BertmodelError(f"{run}: --out is inside the {option} this run reads ({path}); choose an --out "
                                 "outside it")


# -- what a run was trained on -------------------------------------------------------------

def sha256_of(path: Path) -> str:
    """sha256 of a file's bytes, or of a directory's files (relative names and bytes, in
    sorted order; a `save_to_disk` dataset)."""
    from bertprep.storage import sha256_file

    if path.is_file():
        return sha256_file(path)
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode() + b"\0" + bytes.fromhex(sha256_file(f)))
    return h.hexdigest()


def source_identity(source: str | os.PathLike | None) -> dict | None:
    """How a run records one data source: a local file or directory by its content's
    sha256; anything else (a hub dataset's "name[config]:split") by its name alone: a hub
    dataset that changes under the same name is not detected."""
    if source is None:
        return None
    path = Path(source)
    if path.exists():
        return {"source": str(source), "sha256": sha256_of(path)}
    return {"source": str(source)}


def _same_source(saved, now) -> bool:
    if saved is None or now is None:
        return saved == now
    if saved.get("split") != now.get("split"):  # another split of the same saved DatasetDict
        return False
    if "sha256" in saved and "sha256" in now:
        return saved["sha256"] == now["sha256"]  # a file moved or renamed with the same bytes is the same data
    return saved.get("source") == now.get("source")


def _shown(value) -> str:
    if isinstance(value, dict) and "source" in value:
        split = f" split {value['split']}" if value.get("split") else ""
        return f"{value['source']}{split}" + (f" (sha256 {value['sha256'][:12]})" if value.get("sha256") else "")
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return "none" if value is None else json.dumps(value, ensure_ascii=False)


def _same(saved, now) -> bool:
    if isinstance(saved, list) and isinstance(now, list) and all(isinstance(v, dict) for v in saved + now):
        return len(saved) == len(now) and all(_same_source(a, b) for a, b in zip(saved, now))
    if isinstance(saved, dict) and isinstance(now, dict) and ("source" in saved or "source" in now):
        return _same_source(saved, now)
    return saved == now


def _label_list(space: dict | None) -> str:
    """A LabelSpace.to_dict() as a reader sees it: 'building, harbour, market' or 'regression'."""
    if not space:
        return "none"
    return ", ".join(map(str, space.get("labels") or ())) or space.get("kind", "?")


def changed_inputs(saved: dict, now: dict) -> list[str]:
    """One phrase per input that differs ('train: a.tsv (sha256 ...) -> b.tsv (...)')."""
    return [f"{name}: {_shown(saved.get(name))} -> {_shown(now.get(name))}"
            for name in dict.fromkeys([*saved, *now]) if not _same(saved.get(name), now.get(name))]


def check_resume_inputs(saved: dict | None, now: dict, cfg, log, legacy_labels: dict | None = None) -> None:
    """Refuse (or, with allow_changed_options, log) a resume on other data than the run's.
    legacy_labels: the label space a checkpoint from before `inputs` records in its task."""
    if saved is None:  # a checkpoint written before runs recorded their inputs
        log("warning: the checkpoint does not record the data it was trained on; it cannot be compared")
        if legacy_labels is None:
            return
        saved = {"labels": legacy_labels}
        now = {"labels": now.get("labels")}
    if (labels := saved.get("labels")) is not None and labels != now.get("labels"):
        raise BertmodelError(f"{cfg.out}: resuming with another label set ({_label_list(labels)} -> "
                             f"{_label_list(now.get('labels'))}); the trained head's classes cannot change "
                             "(--allow-changed-options does not apply); use a new --out for a new run")
    changed = changed_inputs(saved, now)
    if not changed:
        return
    listed = "; ".join(changed)
    if not cfg.allow_changed_options:
        raise BertmodelError(f"{cfg.out}: resuming on other data than the run was trained on ({listed}); rerun "
                             "with the run's own data, use a new --out for a new run, or pass "
                             "--allow-changed-options to continue on the new data")
    log(f"warning: resuming on changed data, as asked: {listed}")
