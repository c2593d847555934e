"""Report training and evaluation records to TensorBoard and Weights & Biases.

`open_reporters(["tensorboard", "wandb"], run_dir, config, resume_step)` returns one
`Reporters` object; `MetricsWriter(..., reporters=...)` calls its `log(record)` for every
record it appends to metrics.jsonl and closes it with itself. Only rank 0 may open
reporters (the caller checks): every rank writing would duplicate every point.

Scalar names group the metrics.jsonl keys the way TensorBoard lays out cards (by the
part before "/"): train/loss, train/mlm_acc, ...; eval/mlm_acc, eval/f1, ... for every
eval_* key; optim/lr, optim/grad_norm, optim/skipped_steps; speed/samples_per_s,
speed/tokens_per_s, speed/mfu.

TensorBoard: events go to RUN/tensorboard/ through tensorboard's own record writer, one
file per run, written synchronously and flushed per record, so a killed run loses
nothing it logged. torch's SummaryWriter is not used: it writes from a background thread
(a kill loses what it had not flushed), and starts a new file per session named by the
second, so a quick restart can sort before the file it follows; its purge_step only
hides stale steps from readers that honour SessionLog.START. Instead, on resume the
existing files are rewritten into one without the steps after the checkpoint (as
MetricsWriter does to metrics.jsonl), then appended to: the files themselves hold each
step once, in order, for any reader.

W&B: `wandb` in the mode WANDB_MODE names, else online when its server answers, else
offline (RUN/wandb/offline-run-*/; upload later with `wandb sync`). The run id is kept in
RUN/wandb/run-id so a resumed run continues the same W&B run. W&B history is append-only:
steps a killed session logged past its checkpoint are not rewound, and W&B ignores the
resumed run's records for those steps (it warns), which TensorBoard and metrics.jsonl do
not.

Both packages are optional extras, imported only when asked for.
"""
from __future__ import annotations

import math
import os
import secrets
import socket
import time
from pathlib import Path
from typing import Protocol
from urllib.parse import urlparse

from bertmodel.errors import BertmodelError

REPORT_TO = ("none", "tensorboard", "wandb")
OPTIM_KEYS = {"lr", "grad_norm", "skipped_steps"}
SPEED_KEYS = {"samples_per_s", "tokens_per_s", "mfu"}


class Reporter(Protocol):
    def log(self, record: dict) -> None:
        """record: {"step": int, name: float, ...}, a line of metrics.jsonl."""

    def close(self) -> None: ...


def scalar_name(key: str) -> str:
    """metrics.jsonl key -> grouped scalar name (see the module docstring)."""
    if "/" in key:
        return key
    if key.startswith("eval_"):
        return "eval/" + key[len("eval_"):]
    if key in OPTIM_KEYS:
        return "optim/" + key
    if key in SPEED_KEYS:
        return "speed/" + key
    return "train/" + key


def scalars(record: dict) -> dict[str, float]:
    """The record's numbers under their scalar names (step, strings, None, bools left out)."""
    return {scalar_name(k): float(v) for k, v in record.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


def missing_extra(package: str, extra: str) -> BertmodelError:
    return BertmodelError(f"--report-to {package} needs the {package} package: pip install \"bertprep[{extra}]\"")


class Reporters:
    """Several reporters behind one log()/close()."""

    def __init__(self, reporters: list):
        self.reporters = list(reporters)

    def log(self, record: dict) -> None:
        for reporter in self.reporters:
            reporter.log(record)

    def close(self) -> None:
        for reporter in self.reporters:
            reporter.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_reporters(report_to: list[str], run_dir: Path, config: dict, resume_step: int) -> Reporters:
    """Reporters for the names in report_to ("none", "tensorboard", "wandb").

    Call on rank 0 only. resume_step: the step of the checkpoint the run resumes from
    (0 for a fresh start); whatever an earlier session logged after it is dropped.
    config: the run's settings (stored with the W&B run)."""
    names = list(dict.fromkeys(report_to))
    unknown = [n for n in names if n not in REPORT_TO]
    if unknown:
        raise BertmodelError(f"--report-to {unknown[0]}: unknown; choose from {', '.join(REPORT_TO)}")
    if "none" in names and len(names) > 1:
        raise BertmodelError("--report-to none cannot be combined with other reporters")
    opened = []
    try:
        for name in names:
            if name == "tensorboard":
                opened.append(TensorBoardReporter(Path(run_dir) / "tensorboard", resume_step))
            elif name == "wandb":
                opened.append(WandbReporter(Path(run_dir), config))
    except BaseException:
        Reporters(opened).close()
        raise
    return Reporters(opened)


# --- TensorBoard -----------------------------------------------------------------------

def _tensorboard():
    try:
        from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter
    except ImportError:
        raise missing_extra("tensorboard", "tensorboard") from None
    return RawEventFileLoader, event_pb2, summary_pb2, RecordWriter


def event_files(directory: Path) -> list[Path]:
    """Event files in the order readers take them (by name)."""
    return sorted(p for p in Path(directory).glob("*tfevents*") if p.is_file() and not p.name.endswith(".tmp"))


class TensorBoardReporter:
    """Scalars into DIR/events.out.tfevents.<time>.<host>.<pid>.bertmodel."""

    def __init__(self, directory: Path, resume_step: int):
        loader, self._event_pb2, self._summary_pb2, record_writer = _tensorboard()
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.bertmodel"
        self.path = self.directory / name
        tmp = self.path.with_name(self.path.name + ".tmp")
        kept = 0
        with open(tmp, "wb") as f:
            writer = record_writer(f)
            # Earlier files, in reading order, into one: only events up to resume_step (the
            # file_version header is step 0). A record torn by a kill ends its file's events.
            for old in event_files(self.directory):
                for raw in loader(str(old)).Load():  # raw bytes: copied as they are
                    if self._event_pb2.Event.FromString(raw).step <= resume_step:
                        writer.write(raw)
                        kept += 1
            if not kept:
                writer.write(self._event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")
                             .SerializeToString())
        for old in event_files(self.directory):
            if old != self.path:
                old.unlink()
        tmp.replace(self.path)
        self._file = open(self.path, "ab")
        self._writer = record_writer(self._file)

    def log(self, record: dict) -> None:
        values = [self._summary_pb2.Summary.Value(tag=tag, simple_value=value)
                  for tag, value in scalars(record).items()]
        if not values:
            return
        event = self._event_pb2.Event(wall_time=time.time(), step=int(record["step"]),
                                      summary=self._summary_pb2.Summary(value=values))
        self._writer.write(event.SerializeToString())
        self._writer.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


# --- Weights & Biases ------------------------------------------------------------------

def _server_answers(url: str, timeout: float = 3.0) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 80)),
                                      timeout=timeout):
            return True
    except (OSError, TypeError):
        return False


def wandb_mode() -> str:
    """WANDB_MODE when set; else online if the W&B server answers, offline if not."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    return "online" if _server_answers(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")) else "offline"


def _json_safe(config: dict) -> dict:
    """Paths and tuples as W&B's config stores them (strings, lists)."""
    def safe(v):
        if isinstance(v, dict):
            return {str(k): safe(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [safe(x) for x in v]
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else str(v)
        return str(v)
    return safe(config)


class WandbReporter:
    """One W&B run per RUN directory, under RUN/wandb/."""

    def __init__(self, run_dir: Path, config: dict):
        try:
            import wandb
        except ImportError:
            raise missing_extra("wandb", "wandb") from None
        self.run_dir = Path(run_dir)
        directory = self.run_dir / "wandb"
        directory.mkdir(parents=True, exist_ok=True)
        id_file = directory / "run-id"
        run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(4)
        self.mode = wandb_mode()
        try:
            self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "bertmodel"), name=self.run_dir.name,
                                  id=run_id, resume="allow", dir=str(self.run_dir), mode=self.mode,
                                  config=_json_safe(config), settings=wandb.Settings(console="off", silent=True))
        except Exception as exc:  # not logged in, server refused: say so in one line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BertmodelError(f"wandb: could not start a run in {directory} ({first}); "
                                 "set WANDB_MODE=offline to log locally") from None
        id_file.write_text(run_id + "\n")

    def log(self, record: dict) -> None:
        values = scalars(record)
        if values:
            self.run.log(values, step=int(record["step"]))

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
