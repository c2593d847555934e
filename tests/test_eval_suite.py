"""`bertmodel eval-suite`: the suite file's checks, grid points and their names, the
choice of each task's best point and its mean/sd (from recorded results, no training),
and one real suite run of a tiny model through the command line."""
import json
import random
import shlex

import pytest
from click.testing import CliRunner

from bertmodel.cli import main
from bertmodel.cli.suite import check_option
from bertmodel.errors import BertmodelError
from bertmodel.suite import format_table, load_suite, shipped_suites
from bertmodel.suite.report import summarize
from bertmodel.suite.runner import duration, eta, option_args, plan_runs
from bertmodel.suite.spec import point_name
from finetune_fixtures import sentence, tiny_bert, write_tsv
from shared_data import SHARED_DATA

TASK = """
[[task]]
name = "rte"
command = "classify"
train = "train.tsv"
validation = "dev.tsv"
"""


def write_suite(tmp_path, text, name="suite.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# -- the suite file ------------------------------------------------------------------------

@pytest.mark.parametrize("text, key, problem", [
    ('nmae = "x"\n' + TASK, "nmae", "unknown key (known: name, description, seeds, data_dir, defaults, grid, task)"),
    (TASK + 'metrc = "f1"\n', "task 'rte' metrc", "unknown key (known: name, command, train, validation, metric, "
                                                   "options, grid, note)"),
    (TASK.replace('"classify"', '"classfy"'), "task 'rte' command", "'classfy': choose classify, qa, tokens, choice, embed, rerank"),
    (TASK.replace('train = "train.tsv"\n', ""), "task 'rte' train", "missing"),
    (TASK.replace('validation = "dev.tsv"\n', ""), "task 'rte' validation", "missing"),
    (TASK + "grid = { lr = [2e-5], epochs = [] }\n", "task 'rte' grid.epochs",
     "a non-empty list of values to try, got []"),
    ("[grid]\nlr = []\n" + TASK, "grid.lr (for task 'rte')", "a non-empty list of values to try, got []"),
    (TASK + "grid = { lr = 2e-5 }\n", "task 'rte' grid.lr", "a non-empty list of values to try, got 2e-05"),
    (TASK + "grid = { lr = [2e-5, 2e-5] }\n", "task 'rte' grid.lr", "a value appears twice in [2e-05, 2e-05]"),
    (TASK + "options = { lr = 2e-5 }\ngrid = { lr = [3e-5] }\n", "task 'rte' grid.lr",
     "also in the task's options (one place per option)"),
    (TASK + "options = { seed = 3 }\n", "task 'rte' options.seed", "set by the suite itself"),
    (TASK + 'options = { metric_for_best = "f1" }\n', "task 'rte' options.metric_for_best",
     "set by the suite itself (use the task's metric)"),
    ("[defaults]\ntext_colum = 'a'\n" + TASK, "defaults.text_colum (for task 'rte')", "not a finetune option"),
    ("seeds = []\n" + TASK, "seeds", "a non-empty list of integers, got []"),
    ("seeds = [1, 1]\n" + TASK, "seeds", "a seed appears twice in [1, 1]"),
    (TASK + TASK, "task 'rte'", "two tasks have this name"),
    (TASK.replace('"rte"', '"r/te"'), "task #1.name", "'r/te': letters, digits, '.', '_' and '-' only"),
    ('name = "x"\n', "task", "no [[task]] tables"),
    (TASK + 'metric = "acc"\n', "task 'rte' metric", "'acc': `finetune classify` reports accuracy, macro_f1"),
])
def test_a_bad_suite_file_is_one_line_naming_the_file_and_the_key(tmp_path, text, key, problem):
    path = write_suite(tmp_path, text)
    with pytest.raises(BertmodelError) as caught:
        load_suite(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {key}: {problem}"), message
    assert "\n" not in message


def test_not_toml_and_no_such_suite(tmp_path):
    path = write_suite(tmp_path, "name = \n")
    with pytest.raises(BertmodelError, match=f"^{path}: not valid TOML"):
        load_suite(path)
    with pytest.raises(BertmodelError, match="^nope: no such suite file, nor a shipped suite "
                                             r"\(shipped: shared-data, shared-data-cpu\)"):
        load_suite("nope")


@pytest.mark.parametrize("option, value, problem", [
    ("doc_stride", 64, "not an option of `bertmodel finetune classify`"),
    ("lr", "fast", "'fast' is not a valid float range."),
    ("lr", -1.0, "-1.0 is not in the range x>0."),
    ("no_header", "yes", "true or false (the flag --no-header), got 'yes'"),
    ("text_column", ["a", "b"], "one value, not a list (['a', 'b'])"),
    ("out", "x", "set by the suite itself"),
])
def test_the_command_line_checks_each_option_against_its_finetune_command(option, value, problem):
    assert check_option("classify", option, value) == problem
    assert check_option("qa", "doc_stride", 64) is None
    assert check_option("classify", "report_to", ["tensorboard"]) is None


def test_the_command_line_refuses_an_option_of_another_task_before_running(tmp_path):
    path = write_suite(tmp_path, TASK + "options = { doc_stride = 64 }\n")
    result = CliRunner().invoke(main, ["eval-suite", "--model", str(tmp_path), "--suite", str(path), "--out",
                                       str(tmp_path / "out"), "--dry-run"])
    assert result.exit_code == 1
    assert result.output == (f"Error: {path}: task 'rte' options.doc_stride: not an option of "
                             "`bertmodel finetune classify`\n")


@pytest.mark.parametrize("name", ["shared-data", "shared-data-cpu"])
def test_the_shipped_suites_hold_every_task_of_shared_data_and_pass_the_command_line_checks(name):
    suite = load_suite(name, check_option)
    assert [(t.name, t.command, t.metric) for t in suite.tasks] == [
        ("rte", "classify", "accuracy"), ("mrpc", "classify", "f1"), ("cola", "classify", "mcc"),
        ("squad", "qa", "f1"), ("conll2003", "tokens", "f1"), ("e-care", "choice", "accuracy"),
        ("squad-retrieval", "embed", "ndcg@10")]
    assert suite.seeds == [1, 2, 3] and suite.description
    points = [len(t.points()) for t in suite.tasks]
    assert points == ([18] * 6 + [3] if name == "shared-data" else [1] * 7)
    retrieval = suite.tasks[-1]  # one SQuAD file, split by article: trained on train, scored on test
    assert retrieval.train == retrieval.validation and retrieval.options["validation_split"] == "test"
    assert shipped_suites() == ["shared-data", "shared-data-cpu"]


# -- grid points and the runs ------------------------------------------------------------------

def test_the_grid_expands_in_order_with_readable_safe_point_names(tmp_path):
    path = write_suite(tmp_path, '[defaults]\nmax_seq_length = 64\nlr = 1e-4\n' + TASK
                       + 'options = { text_column = "#1 String", no_header = false }\n'
                       + "grid = { lr = [2e-5, 3e-5], epochs = [3], batch_size = [16, 32] }\n")
    task = load_suite(path).tasks[0]
    assert [p.name for p in task.points()] == [
        "lr=2e-05,epochs=3,batch_size=16", "lr=2e-05,epochs=3,batch_size=32",
        "lr=3e-05,epochs=3,batch_size=16", "lr=3e-05,epochs=3,batch_size=32"]
    assert task.points()[1].options == {"lr": 2e-5, "epochs": 3, "batch_size": 32}
    assert point_name({"text_column": "#1 String/x", "no_header": True}) == "text_column=_1_String_x,no_header=true"
    assert option_args({"text_column": "#1 String", "no_header": True, "version_2": False,
                        "report_to": ["tensorboard", "wandb"]}) == [
        "--text-column", "#1 String", "--no-header", "--report-to", "tensorboard", "--report-to", "wandb"]
    suite = load_suite(path).select(seeds=[7, 8])
    runs = plan_runs(suite, "/m", tmp_path / "out", tmp_path)
    assert len(runs) == 8 and [r.seed for r in runs[:3]] == [7, 8, 7]
    run = runs[3]
    assert run.out == tmp_path / "out" / "rte" / "lr=2e-05,epochs=3,batch_size=32" / "seed-8"
    assert run.log.name == "seed-8.log" and run.record.name == "seed-8.json"
    # defaults, then the task's options, then the grid point (its lr wins over the default's)
    assert run.argv == ("finetune", "classify", "--model", "/m", "--train", str(tmp_path / "train.tsv"),
                        "--validation", str(tmp_path / "dev.tsv"), "--out", str(run.out), "--seed", "8",
                        "--metric-for-best", "accuracy", "--no-progress", "--max-seq-length", "64",
                        "--lr", "2e-05", "--text-column", "#1 String", "--epochs", "3", "--batch-size", "32")
    no_grid = load_suite(write_suite(tmp_path, TASK, "plain.toml")).tasks[0]
    assert [(p.name, p.options) for p in no_grid.points()] == [("default", {})]


def test_tasks_and_seeds_are_chosen_from_the_command_line(tmp_path):
    path = write_suite(tmp_path, TASK + TASK.replace('"rte"', '"mrpc"'))
    assert [t.name for t in load_suite(path).select(["mrpc"]).tasks] == ["mrpc"]
    with pytest.raises(BertmodelError, match=r"no task 'cola' \(tasks: rte, mrpc\)"):
        load_suite(path).select(["cola"])
    with pytest.raises(BertmodelError, match=r"--seeds: a seed appears twice"):
        load_suite(path).select(seeds=[1, 1])


def test_missing_data_is_one_line_before_anything_runs(tmp_path):
    path = write_suite(tmp_path, TASK)
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n")
    result = CliRunner().invoke(main, ["eval-suite", "--model", str(tmp_path), "--suite", str(path), "--out",
                                       str(tmp_path / "out"), "--data-dir", str(tmp_path)])
    assert result.exit_code == 1 and not (tmp_path / "out").exists()
    assert result.output == (f"Error: {tmp_path / 'dev.tsv'}: not found (suite.toml: task 'rte' validation, under "
                             f"data dir {tmp_path}; --data-dir points the suite at your copies)\n")


@pytest.mark.parametrize("grids, header", [
    (("", ""), "6 runs (2 tasks, 1 grid point each, 3 seeds)"),
    (("grid = { lr = [2e-5, 3e-5] }\n", "grid = { lr = [2e-5, 3e-5] }\n"), "12 runs (2 tasks, 2 grid points each, 3 seeds)"),
    (("grid = { lr = [2e-5, 3e-5], epochs = [2, 3] }\n", ""), "15 runs (2 tasks; grid points: rte 4, mrpc 1; 3 seeds)"),
])
def test_the_dry_run_header_counts_grid_points_per_task_not_their_sum(tmp_path, grids, header):
    path = write_suite(tmp_path, TASK + grids[0] + TASK.replace('"rte"', '"mrpc"') + grids[1])
    for name in ("train.tsv", "dev.tsv"):
        (tmp_path / name).write_text("sentence\tlabel\n")
    result = CliRunner().invoke(main, ["eval-suite", "--model", str(tmp_path), "--suite", str(path), "--out",
                                       str(tmp_path / "out"), "--data-dir", str(tmp_path), "--dry-run"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"suite ({path}): {header}; data dir {tmp_path}"
    assert len(lines) == 1 + int(header.split()[0])
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not (SHARED_DATA / "glue").is_dir(), reason="needs ../shared/data")
def test_the_shipped_cpu_suite_is_seven_tasks_of_one_grid_point_each(tmp_path):
    result = CliRunner().invoke(main, ["eval-suite", "--model", str(tmp_path), "--suite", "shared-data-cpu",
                                       "--data-dir", str(SHARED_DATA), "--out", str(tmp_path / "out"), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "): 21 runs (7 tasks, 1 grid point each, 3 seeds); data dir " in result.stdout.splitlines()[0]


def test_durations():
    assert [duration(s) for s in (12.4, 72, 3599, 7500)] == ["12s", "1m12s", "59m59s", "2h05m"]
    assert [eta(s) for s in (40, 2290, 7500)] == ["40s", "38m", "2h05m"]


# -- choosing the point and the scores ---------------------------------------------------------

def recorded(task, point, values):
    return [{"task": task, "point": point, "seed": seed, "status": "ok", "value": v, "seconds": 10.0}
            if v is not None else {"task": task, "point": point, "seed": seed, "status": "failed", "exit": 1,
                                   "seconds": 2.0}
            for seed, v in enumerate(values, 1)]


def test_the_point_with_the_best_mean_counts_and_its_mean_and_sd_are_right(tmp_path):
    path = write_suite(tmp_path, TASK + "grid = { lr = [2e-5, 3e-5] }\n"
                       + TASK.replace('"rte"', '"squad"').replace('"classify"', '"qa"')
                       + TASK.replace('"rte"', '"ppl"') + 'metric = "loss"\ngrid = { lr = [1e-5, 2e-5] }\n')
    suite = load_suite(path)
    results = (recorded("rte", "lr=2e-05", [0.6, 0.7, 0.8])      # the best seed, but not the best mean
               + recorded("rte", "lr=3e-05", [0.75, None, 0.72])  # a better mean, but one run failed
               + recorded("squad", "default", [80.0, 82.0, 84.0])
               + recorded("ppl", "lr=1e-05", [0.5, 0.7, 0.6]) + recorded("ppl", "lr=2e-05", [0.4, 0.5, 0.6]))
    summary = summarize(suite, results, model="/m/bert", data_dir=tmp_path, wall_seconds=60.0)
    rte, squad, ppl = summary["tasks"]
    assert [(p["name"], p["seeds"]) for p in rte["points"]] == [("lr=2e-05", 3), ("lr=3e-05", 2)]
    assert rte["points"][0]["mean"] == pytest.approx(70.0) and rte["points"][0]["std"] == pytest.approx(10.0)
    assert rte["points"][1]["mean"] == pytest.approx(73.5) and rte["points"][1]["std"] == pytest.approx(2.1213203)
    # the complete point counts: a failed seed must not lift a point's mean
    assert (rte["chosen"], rte["seeds"], rte["failed"], rte["scale"]) == ("lr=2e-05", 3, 1, 100)
    assert rte["mean"] == pytest.approx(70.0) and rte["std"] == pytest.approx(10.0)  # sd of 60, 70, 80 (n - 1)
    assert (squad["scale"], squad["mean"], squad["std"]) == (1, pytest.approx(82.0), pytest.approx(2.0))
    assert (ppl["chosen"], ppl["greater_is_better"], ppl["mean"]) == ("lr=2e-05", False, pytest.approx(0.5))
    assert (summary["average"], summary["average_of"]) == (pytest.approx((70.0 + 82.0) / 2), 2)  # not the loss
    assert (summary["runs"], summary["failed"], summary["run_seconds"]) == (15, 1, 142.0)
    assert format_table(summary).splitlines() == [
        "suite: /m/bert (seeds 1, 2, 3)",
        "task     metric    score          seeds  grid point",
        "rte      accuracy  70.00 ± 10.00  3      lr=2e-05",
        "squad    f1        82.00 ±  2.00  3      default",
        "ppl      loss       0.50 ±  0.10  3      lr=2e-05",
        "-------  --------  -------------  -----  --------------",
        "average            76.00                 (2 of 3 tasks)",
        "score: mean ± sd over seeds at the grid point with the best mean on validation; 0-1 metrics x100"]


def test_where_no_point_has_every_seed_the_best_partial_one_counts(tmp_path):
    suite = load_suite(write_suite(tmp_path, TASK + "grid = { lr = [2e-5, 3e-5] }\n"))
    results = recorded("rte", "lr=2e-05", [0.6, None, 0.7]) + recorded("rte", "lr=3e-05", [None, 0.8, 0.75])
    rte = summarize(suite, results, model="m", data_dir=tmp_path, wall_seconds=1)["tasks"][0]
    assert (rte["chosen"], rte["seeds"], rte["mean"]) == ("lr=3e-05", 2, pytest.approx(77.5))


def test_a_task_without_any_result_is_named_and_left_out_of_the_average(tmp_path):
    suite = load_suite(write_suite(tmp_path, TASK + TASK.replace('"rte"', '"mrpc"')))
    results = recorded("rte", "default", [0.5, 0.7]) + recorded("mrpc", "default", [None, None])
    summary = summarize(suite.select(seeds=[1, 2]), results, model="m", data_dir=tmp_path, wall_seconds=1)
    assert (summary["average"], summary["average_of"]) == (pytest.approx(60.0), 1)
    assert summary["tasks"][1]["chosen"] is None
    lines = format_table(summary).splitlines()
    assert lines[2:] == [
        "rte      accuracy  60.00 ± 14.14  2      default",
        "mrpc     accuracy      -          0/2    no result (2 of 2 runs failed)",
        "-------  --------  -------------  -----  ------------------------------",
        "average            60.00                 (1 of 2 tasks)",
        "score: mean ± sd over seeds at the grid point with the best mean on validation; 0-1 metrics x100"]


# -- a real suite run --------------------------------------------------------------------------

@pytest.mark.slow
def test_a_suite_runs_reports_skips_when_rerun_and_names_the_log_of_a_failed_run(tmp_path):
    """2 seeds x a 2-point grid of a tiny classifier, plus a task whose column does not
    exist: 6 fine-tuning subprocesses, then a rerun that runs none."""
    model = tiny_bert(tmp_path)
    rng = random.Random(3)
    rows = [(i, sentence(rng), "yes" if i % 2 else "no") for i in range(48)]
    write_tsv(tmp_path / "train.tsv", ("index", "sentence", "label"), rows[:36])
    write_tsv(tmp_path / "dev.tsv", ("index", "sentence", "label"), rows[36:])
    suite = write_suite(tmp_path, f"""
name = "tiny"
seeds = [1, 2]
data_dir = "."
[defaults]
epochs = 1
batch_size = 12
device = "cpu"
[[task]]
name = "good"
command = "classify"
train = "train.tsv"
validation = "dev.tsv"
grid = {{ lr = [1e-3, 1e-4] }}
[[task]]
name = "bad"
command = "classify"
train = "train.tsv"
validation = "dev.tsv"
options = {{ text_column = "nope" }}
""")
    out = tmp_path / "out"
    args = ["eval-suite", "--model", str(model), "--suite", str(suite), "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    progress = result.stderr.splitlines()
    assert progress[0] == f"tiny: 6 runs (2 tasks; grid points: good 2, bad 1; 2 seeds) in {out}"
    assert [line.split(":")[0] for line in progress[1:7]] == [
        "[1/6] good seed 1 lr=0.001", "[2/6] good seed 2 lr=0.001", "[3/6] good seed 1 lr=0.0001",
        "[4/6] good seed 2 lr=0.0001", "[5/6] bad seed 1 default", "[6/6] bad seed 2 default"]
    assert all(": accuracy 0." in line for line in progress[1:5])
    for seed, line in zip((1, 2), progress[5:7]):
        log = out / "bad" / "default" / f"seed-{seed}.log"
        assert ": failed (exit 1; " in line and f"): see {log} (Error: " in line, line
        assert "nope" in log.read_text()
    assert progress[-2:] == [f"results: {out / 'results.json'}, {out / 'results.png'}",
                             "Error: 2 of 6 runs failed (their logs are named above); rerun the same command to "
                             "retry them"]

    saved = json.loads((out / "results.json").read_text())
    good, bad = saved["tasks"]
    for point in good["points"]:
        values = []
        for run in point["runs"]:
            best = json.loads((out / "good" / point["name"] / f"seed-{run['seed']}" / "best.json").read_text())
            assert run["value"] == best["value"] and run["status"] == "ok"
            values.append(100 * best["value"])
        assert point["mean"] == pytest.approx(sum(values) / 2)
        assert point["std"] == pytest.approx(abs(values[0] - values[1]) / 2 ** 0.5)
    chosen = max(good["points"], key=lambda p: p["mean"])
    assert (good["chosen"], good["mean"], good["seeds"]) == (chosen["name"], chosen["mean"], 2)
    assert (bad["chosen"], bad["failed"], saved["failed"], saved["average"]) == (None, 2, 2, good["mean"])
    assert (saved["suite"], saved["model"], saved["seeds"]) == ("tiny", str(model), [1, 2])
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.stdout.splitlines()[2].startswith(f"good     accuracy  {good['mean']:.2f} ± {good['std']:.2f}  2")

    logs = {p: p.read_text() for p in out.rglob("seed-*.log") if "good" in p.parts}
    again = CliRunner().invoke(main, args + ["--tasks", "good"])
    assert again.exit_code == 0, again.output
    assert again.stderr.splitlines()[:2] == [f"tiny: 4 runs (1 task, 2 grid points, 2 seeds) in {out}",
                                             "4 of 4 runs finished before: skipped (nothing to run)"]
    assert "[1/" not in again.stderr
    assert {p: p.read_text() for p in logs} == logs
    assert json.loads((out / "results.json").read_text())["tasks"][0]["points"] == good["points"]
    planned = CliRunner().invoke(main, args + ["--dry-run"]).stdout.splitlines()
    assert planned[0].endswith(f"6 runs (2 tasks; grid points: good 2, bad 1; 2 seeds); data dir {tmp_path}; "
                               "4 finished before")
    assert planned[1].startswith("[1/6] good seed 1 lr=0.001 (finished: skipped): bertmodel finetune classify ")
    bad_argv = ["finetune", "classify", "--model", str(model), "--train", str(tmp_path / "train.tsv"),
                "--validation", str(tmp_path / "dev.tsv"), "--out", str(out / "bad" / "default" / "seed-2"),
                "--seed", "2", "--metric-for-best", "accuracy", "--no-progress", "--epochs", "1", "--batch-size", "12",
                "--device", "cpu", "--text-column", "nope"]
    assert planned[6] == (f"[6/6] bad seed 2 default: bertmodel {shlex.join(bad_argv)} > "
                          f"{out / 'bad' / 'default' / 'seed-2.log'}")

    # The model re-exported to the same path (more training, another checkpoint): the
    # finished runs are not its scores, and rerunning them would resume the old runs.
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes())
    changed = CliRunner().invoke(main, args + ["--tasks", "good"])
    assert changed.exit_code == 1
    assert changed.stderr.splitlines()[-1] == (f"Error: {out / 'good' / 'lr=0.001' / 'seed-1'}: finished with another "
                                               "model than is at the same path now; use a new --out for the new one")


@pytest.mark.slow
def test_out_holds_one_models_runs_and_a_task_subset_keeps_the_other_tasks_results(tmp_path):
    """Two tasks of one run each, run one --tasks at a time (2 fine-tuning subprocesses),
    then another model into the same --out: refused before anything runs."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    model, other = tiny_bert(tmp_path / "a"), tiny_bert(tmp_path / "b")
    rng = random.Random(5)
    rows = [(i, sentence(rng), "yes" if i % 2 else "no") for i in range(48)]
    write_tsv(tmp_path / "train.tsv", ("index", "sentence", "label"), rows[:36])
    write_tsv(tmp_path / "dev.tsv", ("index", "sentence", "label"), rows[36:])
    tasks = "".join(f"""
[[task]]
name = "{name}"
command = "classify"
train = "train.tsv"
validation = "dev.tsv"
""" for name in ("first", "second"))
    suite = write_suite(tmp_path, f'seeds = [1]\ndata_dir = "."\n[defaults]\nepochs = 1\nbatch_size = 12\n'
                                  f'device = "cpu"\n{tasks}')
    out = tmp_path / "out"
    args = ["eval-suite", "--suite", str(suite), "--out", str(out)]
    first = CliRunner().invoke(main, args + ["--model", str(model), "--tasks", "first"])
    assert first.exit_code == 0, first.output
    saved = json.loads((out / "results.json").read_text())
    assert [t["name"] for t in saved["tasks"]] == ["first"]
    assert json.loads((out / "suite.json").read_text()) == {"model": str(model)}

    # Another task of the same model: its row is added, the first task's stays as it was.
    second = CliRunner().invoke(main, args + ["--model", str(model), "--tasks", "second"])
    assert second.exit_code == 0, second.output
    assert second.stderr.splitlines()[1].startswith("[1/1] second seed 1 default: accuracy 0.")
    both = json.loads((out / "results.json").read_text())
    assert [t["name"] for t in both["tasks"]] == ["first", "second"]
    assert both["tasks"][0] == saved["tasks"][0]
    assert both["runs"] == 2 and both["average_of"] == 2
    assert [line.split()[0] for line in second.stdout.splitlines()[2:4]] == ["first", "second"]

    # Another model into the same --out: one line before any run; nothing in OUT changes.
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    for extra in ([], ["--dry-run"], ["--tasks", "second"]):
        refused = CliRunner().invoke(main, args + ["--model", str(other), *extra])
        assert refused.exit_code == 1
        assert refused.output == (f"Error: {out}: holds the eval-suite runs of another model ({model}); use a new "
                                  f"--out for {other}\n")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before



@pytest.mark.parametrize("command, metric, problem", [
    ("embed", None, None), ("embed", "map", None), ("embed", "accuracy", "reports ndcg@10, mrr@10, recall@100, map"),
    ("rerank", None, None), ("rerank", "auc", None), ("rerank", "recall@100", None),  # pairs; a BEIR directory
    ("rerank", "f1", "reports ndcg@10, mrr@10, accuracy, auc, loss, recall@100, map"),
])
def test_retrieval_tasks_take_the_metrics_their_runs_report(tmp_path, command, metric, problem):
    """embed reports trec_eval's measures; rerank its pairs' figures on labelled pairs and
    trec_eval's on a BEIR directory (tasks/rerank.py metric_names), ndcg@10 by default."""
    text = TASK.replace('"classify"', f'"{command}"') + (f'metric = "{metric}"\n' if metric else "")
    path = write_suite(tmp_path, text)
    if problem:
        with pytest.raises(BertmodelError, match=f"task 'rte' metric: '{metric}': `finetune {command}` {problem}$"):
            load_suite(path)
    else:
        assert load_suite(path).tasks[0].metric == (metric or "ndcg@10")


def test_a_rerank_task_sets_its_loss_and_depth_and_names_recall_for_it(tmp_path):
    """`finetune rerank --loss/--top-k` in a suite: the command's own names, passed on as
    its flags; recall is the reranker's at min(100, top_k), so a suite asking recall@100
    of 20 candidates is told the name the runs will report before anything runs."""
    rerank = TASK.replace('"classify"', '"rerank"')
    suite = load_suite(write_suite(tmp_path, rerank + 'metric = "recall@20"\noptions = { loss = "listwise", top_k = 20 }\n'),
                       check_option)
    assert option_args(suite.tasks[0].options) == ["--loss", "listwise", "--top-k", "20"]
    with pytest.raises(BertmodelError, match=r"'recall@100': `finetune rerank` reports ndcg@10, mrr@10, accuracy, auc, "
                                             r"loss, recall@20, map$"):
        load_suite(write_suite(tmp_path, rerank + 'metric = "recall@100"\noptions = { top_k = 20 }\n'), check_option)
    # top_k in the grid: one depth for every point names recall; several name none
    grid = rerank + 'metric = "recall@100"\n[task.grid]\ntop_k = [100, 200]\n'
    assert load_suite(write_suite(tmp_path, grid), check_option).tasks[0].metric == "recall@100"
    with pytest.raises(BertmodelError, match=r"reports ndcg@10, mrr@10, accuracy, auc, loss, map$"):
        load_suite(write_suite(tmp_path, rerank + 'metric = "recall@20"\n[task.grid]\ntop_k = [20, 50]\n'), check_option)
    with pytest.raises(BertmodelError, match=r"options.loss: not a finetune option"):
        load_suite(write_suite(tmp_path, TASK + 'options = { loss = "listwise" }\n'), check_option)
