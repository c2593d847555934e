"""The suite file: which tasks to fine-tune, on which files, with which grid and seeds.
A TOML file, or the name of one shipped in suites/ (`shared-data`, `shared-data-cpu`):

    name = "glue-small"                # default: the file's name
    description = "What it measures and where its data come from."
    seeds = [1, 2, 3]                  # default [1, 2, 3]; --seeds overrides
    data_dir = "~/data"                # optional, relative to this file; --data-dir overrides

    [defaults]                         # finetune options for every task (FinetuneConfig fields)
    max_seq_length = 128
    [grid]                             # the grid of every task that has no grid of its own
    lr = [2e-5, 3e-5, 5e-5]

    [[task]]
    name = "rte"                       # folder name under --out: letters, digits, . _ -
    command = "classify"               # classify | qa | tokens | choice | embed | rerank (bertmodel finetune ...)
    train = "glue/RTE/train.tsv"       # relative to the data dir
    validation = "glue/RTE/dev.tsv"
    metric = "accuracy"                # --metric-for-best; default accuracy (classify, choice), f1 (qa, tokens),
                                       # ndcg@10 (embed, rerank)
    options = { text_column = "sentence1", text_pair_column = "sentence2" }
    grid = { lr = [2e-5, 3e-5, 5e-5], epochs = [3], batch_size = [32] }   # replaces [grid]
    note = "Shown in --dry-run and kept in results.json."

A task's options are its `[defaults]`, then its `options`, then a grid point's values,
later ones winning; an option may not be both in `options` and in the task's grid.
Every run is `bertmodel finetune COMMAND` with those options as flags (`true` adds a
flag such as --no-header, `false` leaves it out). The suite itself sets --model,
--train, --validation, --out, --seed, --metric-for-best and --no-progress, so they are
refused as options.

Every mistake is one line naming the file and the key; nothing runs until the whole
file is right.
"""
from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bertmodel.errors import BertmodelError
from bertmodel.finetune import FinetuneConfig
from bertmodel.metrics.ranking import recall_depth
from bertmodel.tasks.task_defaults import TASK_DEFAULTS, config_field

try:  # Python 3.11+
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

SHIPPED = Path(__file__).resolve().parent / "suites"
DEFAULT_SEEDS = (1, 2, 3)
# finetune COMMAND -> the metric its runs are judged by unless the task names another
DEFAULT_METRICS = {command: metric for command, (metric, _) in TASK_DEFAULTS["metric_for_best"].items()}
# The metrics each command's runs report (tasks' metric_names; which of them a run has
# depends on its data: binary f1 on two classes, pearson on regression, an entity type's
# <TYPE>_f1 on its tags), checked before anything runs: a typo would fail every run.
METRICS = {"classify": ("accuracy", "macro_f1", "mcc", "f1", "loss", "pearson", "spearman", "mse"),
           "qa": ("exact_match", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1"),
           "tokens": ("f1", "precision", "recall", "accuracy", "loss"),
           "choice": ("accuracy", "loss"),
           # retrieval on a BEIR directory (or a SQuAD file's by-article split), trec_eval's measures
           "embed": ("ndcg@10", "mrr@10", "recall@100", "map"),
           # labelled (query, passage) pairs: per-query ranking of each query's candidates, and the pairs' own;
           # a BEIR directory: BM25's top --top-k reranked, trec_eval's measures
           "rerank": ("ndcg@10", "mrr@10", "accuracy", "auc", "loss", "recall@100", "map")}
def reported_metrics(command: str, options: dict, grid: dict) -> tuple[str, ...]:
    """The metrics `command`'s runs report with these options: a reranker counts recall
    at min(100, --top-k), so its recall is named for that depth (one name for every grid
    point, or none where the grid's top_k values give several)."""
    metrics = METRICS[command]
    if command != "rerank":
        return metrics
    top_ks = grid.get("top_k") or [options.get("top_k")]
    depths = {recall_depth(None if k is None else int(k)) for k in top_ks}
    recall = f"recall@{depths.pop()}" if len(depths) == 1 else None
    return tuple(recall if m.startswith("recall@") else m for m in metrics if recall or not m.startswith("recall@"))


PER_TYPE = re.compile(r".+_(f1|precision|recall)")  # tokens: an entity type's own figures
SUITE_KEYS = ("name", "description", "seeds", "data_dir", "defaults", "grid", "task")
TASK_KEYS = ("name", "command", "train", "validation", "metric", "options", "grid", "note")
SET_BY_SUITE = ("task", "model", "train", "validation", "out", "seed", "metric_for_best", "progress")
FINETUNE_FIELDS = frozenset(f.name for f in dataclasses.fields(FinetuneConfig)) - set(SET_BY_SUITE)
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._+-]")

# (command, option, value) -> what is wrong with it, or None. The CLI passes one that asks
# the `finetune COMMAND` command itself; without it only FinetuneConfig's fields are known.
OptionCheck = Callable[[str, str, object], "str | None"]


def check_finetune_field(command: str, option: str, value) -> str | None:
    """The library's own check: a FinetuneConfig field the suite does not set itself."""
    if option in SET_BY_SUITE:
        return "set by the suite itself" + (" (use the task's metric)" if option == "metric_for_best" else "")
    if config_field(command, option) not in FINETUNE_FIELDS:
        return f"not a finetune option (known: {', '.join(sorted(FINETUNE_FIELDS))})"
    return None


@dataclass(frozen=True)
class GridPoint:
    name: str
    """Readable and safe as a folder name: "lr=2e-05,epochs=3,batch_size=32" ("default" for no grid)."""
    options: dict


@dataclass
class TaskSpec:
    name: str
    command: str
    """The `bertmodel finetune` command: classify, qa, tokens, choice, embed or rerank."""
    train: str
    """Training file, relative to the data dir (or absolute)."""
    validation: str
    metric: str
    """The validation metric that counts (--metric-for-best; the value RUN/best.json keeps)."""
    options: dict = field(default_factory=dict)
    """The suite's defaults with the task's own options over them."""
    grid: dict = field(default_factory=dict)
    """option -> the values to try; every combination is a grid point."""
    note: str = ""

    def points(self) -> list[GridPoint]:
        """Every combination of the grid's values, the first key varying slowest."""
        if not self.grid:
            return [GridPoint("default", {})]
        keys = list(self.grid)
        return [GridPoint(point_name(dict(zip(keys, values))), dict(zip(keys, values)))
                for values in itertools.product(*(self.grid[k] for k in keys))]


@dataclass
class Suite:
    name: str
    path: Path
    description: str = ""
    seeds: list[int] = field(default_factory=lambda: list(DEFAULT_SEEDS))
    data_dir: Path | None = None
    """The file's own data_dir (resolved against the file's folder), or None."""
    tasks: list[TaskSpec] = field(default_factory=list)

    def select(self, names: list[str] | None = None, seeds: list[int] | None = None) -> Suite:
        """The suite cut to the tasks named (in the file's order) and run with other seeds."""
        tasks = self.tasks
        if names:
            known = [t.name for t in self.tasks]
            unknown = [n for n in names if n not in known]
            if unknown:
                raise BertmodelError(f"{self.path}: no task {unknown[0]!r} (tasks: {', '.join(known)})")
            tasks = [t for t in self.tasks if t.name in names]
        if seeds is not None:
            seeds = _seeds(seeds, "--seeds")
        return dataclasses.replace(self, tasks=tasks, seeds=list(seeds) if seeds is not None else self.seeds)


def format_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def point_name(options: dict) -> str:
    """"lr=2e-05,epochs=3,batch_size=32": readable, and a safe folder name on any system."""
    return ",".join(f"{UNSAFE_CHARS.sub('_', k)}={UNSAFE_CHARS.sub('_', format_value(v))}"
                    for k, v in options.items())


def shipped_suites() -> list[str]:
    return sorted(p.stem for p in SHIPPED.glob("*.toml"))


def resolve_suite(value) -> Path:
    """A suite file, or the name of a shipped suite (suites/NAME.toml)."""
    path = Path(value).expanduser()
    if path.is_file():
        return path
    if (SHIPPED / f"{value}.toml").is_file():
        return SHIPPED / f"{value}.toml"
    raise BertmodelError(f"{value}: no such suite file, nor a shipped suite (shipped: {', '.join(shipped_suites())})")


def load_suite(source, check_option: OptionCheck | None = None) -> Suite:
    """Read and check a suite file (or shipped suite name); see the module docstring."""
    path = resolve_suite(source)
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise BertmodelError(f"{path}: not valid TOML ({exc})") from None
    return _Reader(path, check_option or check_finetune_field).suite(raw)


def _seeds(value, where: str) -> list[int]:
    if not isinstance(value, list) or not value or not all(type(s) is int for s in value):
        raise BertmodelError(f"{where}: a non-empty list of integers, got {value!r}")
    if len(set(value)) != len(value):
        raise BertmodelError(f"{where}: a seed appears twice in {value!r}")
    return list(value)


class _Reader:
    """Turns the parsed TOML into a Suite, raising one line "FILE: KEY: problem" at the
    first mistake."""

    def __init__(self, path: Path, check_option: OptionCheck):
        self.path = path
        self.check_option = check_option

    def fail(self, key: str, problem: str):
        raise BertmodelError(f"{self.path}: {key}: {problem}")

    def keys(self, table: dict, allowed: tuple, where: str) -> None:
        for key in table:
            if key not in allowed:
                self.fail(f"{where}{key}", f"unknown key (known: {', '.join(allowed)})")

    def text(self, table: dict, key: str, where: str, default: str | None = None) -> str:
        value = table.get(key, default)
        if value is None:
            self.fail(f"{where}{key}", "missing")
        if not isinstance(value, str) or not value.strip():
            self.fail(f"{where}{key}", f"a non-empty string, got {value!r}")
        return value

    def table(self, table: dict, key: str, where: str) -> dict:
        value = table.get(key, {})
        if not isinstance(value, dict):
            self.fail(f"{where}{key}", f"a table, got {value!r}")
        return value

    def suite(self, raw: dict) -> Suite:
        self.keys(raw, SUITE_KEYS, "")
        name = self.text(raw, "name", "", default=self.path.stem)
        description = raw.get("description", "")
        if not isinstance(description, str):
            self.fail("description", f"a string, got {description!r}")
        try:
            seeds = _seeds(raw.get("seeds", list(DEFAULT_SEEDS)), "seeds")
        except BertmodelError as exc:
            raise BertmodelError(f"{self.path}: {exc}") from None
        data_dir = None
        if "data_dir" in raw:
            data_dir = self.path.parent / Path(self.text(raw, "data_dir", "")).expanduser()
        defaults = self.table(raw, "defaults", "")
        grid = self.table(raw, "grid", "")
        tasks = raw.get("task")
        if not isinstance(tasks, list) or not tasks or not all(isinstance(t, dict) for t in tasks):
            self.fail("task", "no [[task]] tables (a suite lists at least one task)")
        specs = [self.task(t, i, defaults, grid) for i, t in enumerate(tasks, 1)]
        names = [t.name for t in specs]
        for task_name in names:
            if names.count(task_name) > 1:
                self.fail(f"task {task_name!r}", "two tasks have this name")
        return Suite(name=name, path=self.path, description=" ".join(description.split()), seeds=seeds, data_dir=data_dir,
                     tasks=specs)

    def task(self, raw: dict, number: int, defaults: dict, suite_grid: dict) -> TaskSpec:
        where = f"task #{number}."
        name = self.text(raw, "name", where)
        if not SAFE_NAME.fullmatch(name):
            self.fail(f"{where}name", f"{name!r}: letters, digits, '.', '_' and '-' only (it names a folder)")
        where = f"task {name!r} "
        self.keys(raw, TASK_KEYS, where)
        command = self.text(raw, "command", where)
        if command not in DEFAULT_METRICS:
            self.fail(f"{where}command", f"{command!r}: choose {', '.join(DEFAULT_METRICS)}")
        train, validation = self.text(raw, "train", where), self.text(raw, "validation", where)
        metric = self.text(raw, "metric", where, default=DEFAULT_METRICS[command])
        note = raw.get("note", "")
        if not isinstance(note, str):
            self.fail(f"{where}note", f"a string, got {note!r}")
        options = self.table(raw, "options", where)
        grid = self.table(raw, "grid", where) if "grid" in raw else suite_grid
        for key, value in defaults.items():
            self.option(command, f"defaults.{key} (for task {name!r})", key, value)
        for key, value in options.items():
            self.option(command, f"{where}options.{key}", key, value)
        for key, values in grid.items():
            at = f"{where}grid.{key}" if "grid" in raw else f"grid.{key} (for task {name!r})"
            if key in options:
                self.fail(at, "also in the task's options (one place per option)")
            if not isinstance(values, list) or not values:
                self.fail(at, f"a non-empty list of values to try, got {values!r}")
            for value in values:
                self.option(command, at, key, value)
            if len({format_value(v) for v in values}) != len(values):
                self.fail(at, f"a value appears twice in {values!r}")
        reported = reported_metrics(command, {**defaults, **options}, grid)
        if metric not in reported and not (command == "tokens" and PER_TYPE.fullmatch(metric)):
            self.fail(f"{where}metric", f"{metric!r}: `finetune {command}` reports {', '.join(reported)}"
                      + (" (and <TYPE>_f1 per entity type)" if command == "tokens" else "")
                      + ("; plain tags (no entities) report accuracy alone" if command == "tokens" else ""))
        return TaskSpec(name=name, command=command, train=train, validation=validation, metric=metric,
                        options={**defaults, **options}, grid=dict(grid), note=note.strip())

    def option(self, command: str, key: str, option: str, value) -> None:
        values = value if isinstance(value, list) else [value]  # a list: a repeated option (report_to)
        if not values or not all(isinstance(v, (str, int, float, bool)) for v in values):
            self.fail(key, f"a string, number or true/false, got {value!r}")
        problem = self.check_option(command, option, value)
        if problem:
            self.fail(key, problem)
