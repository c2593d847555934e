"""Every command of both CLIs has a summary, help on every option and an example, and
each option's help states one default, the command's own."""
import re

import click
import pytest
from click.testing import CliRunner

from bertmodel.cli import main as bertmodel_main
from bertmodel.finetune import FinetuneConfig
from bertmodel.tasks.task_defaults import TASK_DEFAULTS, task_default
from bertprep.cli import main as bertprep_main

COMMANDS = [(bertprep_main, name) for name in bertprep_main.commands] + [
    (bertmodel_main, name) for name in bertmodel_main.commands
] + [(bertmodel_main.commands["finetune"], name) for name in bertmodel_main.commands["finetune"].commands]


def test_the_command_sets():
    assert set(bertprep_main.commands) == {"train-tokenizer", "extend-tokenizer", "encode", "build-shards", "inspect",
                                           "stdlib-corpus"}
    assert set(bertmodel_main.commands) == {"pretrain", "finetune", "evaluate", "predict", "export-hf", "shrink",
                                            "fill-mask", "demo", "plot", "eval-suite", "squad-to-beir", "embed", "search"}
    assert set(bertmodel_main.commands["finetune"].commands) == {"classify", "qa", "tokens", "choice", "embed",
                                                                 "rerank"}


@pytest.mark.parametrize("group, name", COMMANDS, ids=[name for _, name in COMMANDS])
def test_command_help(group, name):
    command = group.commands[name]
    result = CliRunner().invoke(group, [name, "--help"])
    assert result.exit_code == 0
    summary = command.get_short_help_str(limit=200)
    assert len(summary) > 10, f"{name} has no one-line summary"
    assert "Example:" in result.output
    for param in command.params:
        if isinstance(param, click.Option) and param.name != "help":
            assert param.help, f"{name} {param.opts[0]} has no help text"
            assert param.opts[0] in result.output


@pytest.mark.parametrize("group, prog", [(bertprep_main, "bertprep"), (bertmodel_main, "bertmodel")])
def test_group_help_and_version(group, prog):
    runner = CliRunner()
    assert runner.invoke(group, ["-h"]).exit_code == 0
    result = runner.invoke(group, ["--version"])
    assert result.exit_code == 0 and result.output.startswith(f"{prog}, version ")


CLASSIFY_ONLY = {"--text-column", "--text-pair-column", "--no-header", "--num-labels"}
QA_ONLY = {"--doc-stride", "--max-query-length", "--version-2", "--null-threshold", "--n-best",
           "--max-answer-length"}
TOKENS_ONLY = {"--tokens-column", "--tags-column", "--label-all-tokens"}
CHOICE_ONLY = {"--context-column", "--question-column", "--choices-column", "--choice-columns"}
OWN = {"classify": CLASSIFY_ONLY, "qa": QA_ONLY, "tokens": TOKENS_ONLY, "choice": CHOICE_ONLY}


@pytest.mark.parametrize("name, own, other", [(name, own, set().union(*(o for n, o in OWN.items() if n != name)))
                                              for name, own in OWN.items()])
def test_each_finetune_task_takes_and_shows_only_its_own_options(name, own, other):
    group = bertmodel_main.commands["finetune"]
    options = {opt for param in group.commands[name].params for opt in param.opts}
    assert own <= options and not other & options
    shown = CliRunner().invoke(group, [name, "--help"]).output
    assert not [opt for opt in other if f"{opt} " in shown]
    option = sorted(other)[0]
    owner = next(n for n, o in OWN.items() if option in o)
    refused = CliRunner().invoke(group, [name, "--model", ".", "--out", "x", option, "1"])
    assert refused.exit_code == 2
    assert refused.output == f"Error: {option} is an option of finetune {owner}, not of {name}\n"


@pytest.mark.parametrize("name", ["qa", "tokens"])
def test_classifier_pooling_is_refused_where_nothing_pools(name):
    """ModernBERT's classifier_pooling shapes the one vector classify and choice score; qa
    and tokens score every token, so it would change nothing but the export's config.json."""
    group = bertmodel_main.commands["finetune"]
    for task in ("classify", "choice", "rerank"):
        assert "--classifier-pooling" in CliRunner().invoke(group, [task, "--help"]).output
    assert "--classifier-pooling" not in CliRunner().invoke(group, [name, "--help"]).output
    refused = CliRunner().invoke(group, [name, "--model", ".", "--out", "x", "--classifier-pooling", "mean"])
    assert refused.exit_code == 2
    assert refused.output == (f"Error: --classifier-pooling is an option of finetune classify and choice and rerank, not of "
                              f"{name}: it pools a sequence into one vector (ModernBERT), and {name} scores every "
                              "token\n")
    from bertmodel.errors import BertmodelError
    from bertmodel.finetune import FinetuneConfig

    with pytest.raises(BertmodelError, match=r"^classifier pooling applies to classify, choice and rerank, not to " + name):
        FinetuneConfig(task=name, model=".", out="x", classifier_pooling="mean")


def test_task_options_keep_their_defaults_and_the_help_shows_them():
    group = bertmodel_main.commands["finetune"]
    given = {name: group.commands[name].make_context(name, ["--model", ".", "--out", "x"]).params
             for name in ("classify", "qa")}
    assert {k: given["classify"][k] for k in ("text_column", "label_column", "text_pair_column", "no_header",
                                              "num_labels", "max_seq_length")} == {
        "text_column": None, "label_column": "label", "text_pair_column": None, "no_header": False,
        "num_labels": None, "max_seq_length": None}
    assert {k: given["qa"][k] for k in ("doc_stride", "max_answer_length", "max_query_length", "n_best",
                                        "null_threshold", "version_2", "max_seq_length")} == {
        "doc_stride": 128, "max_answer_length": 30, "max_query_length": 64, "n_best": 20,
        "null_threshold": 0.0, "version_2": None, "max_seq_length": None}
    shown = {name: " ".join(CliRunner().invoke(group, [name, "--help"]).output.split()) for name in given}
    assert "Tokens per example. [default: 128] [x>=8]" in shown["classify"]
    assert "Tokens per window (question + context). [default: 384] [x>=8]" in shown["qa"]


def test_evaluate_takes_both_tasks_options_and_says_which_task_each_is_for():
    command = bertmodel_main.commands["evaluate"]
    given = command.make_context("evaluate", ["."]).params
    shown = " ".join(CliRunner().invoke(bertmodel_main, ["evaluate", "--help"]).output.split())
    every = set().union(*OWN.values()) - {"--num-labels"}
    for param in command.params:
        for name, own in OWN.items():
            if param.opts[0] in own - {"--num-labels"}:
                assert param.help.endswith(f" ({name})."), param.opts[0]
        if param.opts[0] == "--label-column":  # the label of a classifier and the right choice's index
            assert param.help.endswith(" (classify, choice)."), param.help
        if param.opts[0] in every | {"--label-column"}:
            assert given[param.name] is None, param.opts[0]  # absent: the run's own option
    assert "Data options default to those the run was trained with" in shown


def every_command(command: click.Command, path: tuple[str, ...]):
    """(path, command) for `command` and everything under it, groups included."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from every_command(sub, path + (name,))


EVERY = [*every_command(bertprep_main, ("bertprep",)), *every_command(bertmodel_main, ("bertmodel",))]
STATED = re.compile(r"default:", re.IGNORECASE)  # click's "[default: x]" and a help's own "Default: x"


def shown_help(command: click.Command, param: click.Option, path) -> str:
    """The option's help as --help prints it (click adds its own [default: ...]), on one line."""
    record = param.get_help_record(click.Context(command, info_name=path[-1]))
    return " ".join(record[1].split()) if record else ""


RENAMED = {"loss": "rerank_loss", "top_k": "rerank_top_k"}  # finetune rerank's options -> FinetuneConfig's


def test_the_walk_reaches_every_command():
    names = {" ".join(path) for path, _ in EVERY}
    assert {"bertprep train-tokenizer", "bertmodel pretrain", "bertmodel finetune embed",
            "bertmodel finetune rerank", "bertmodel eval-suite"} <= names
    assert len(names) == 1 + 6 + 1 + 13 + 6


@pytest.mark.parametrize("path, command", EVERY, ids=[" ".join(path) for path, _ in EVERY])
def test_each_option_states_at_most_one_default_and_its_own(path, command):
    """One default per option, and the one this command uses when the option is omitted:
    click's default where click sets one, else, for the finetune options whose default
    depends on the command (tasks/task_defaults.py), this command's row of that table, with
    no click default beside it (one would be every command's, and say so)."""
    task = path[2] if path[1:2] == ("finetune",) and len(path) == 3 else None
    # What `finetune TASK` is given, and what the library makes of it, with every option omitted
    given = command.make_context(task, ["--model", ".", "--out", "x"]).params if task else {}
    library = FinetuneConfig(task=task, model=".", out="x") if task else None
    for param in command.params:
        if not isinstance(param, click.Option) or param.name == "help":
            continue
        text = shown_help(command, param, path)
        where = f"{' '.join(path)} {param.opts[0]}: {text}"
        assert len(STATED.findall(text)) <= 1, where
        stated = re.search(r"default: ([^;\]]+)", text)
        if task in TASK_DEFAULTS.get(param.name, {}):
            assert given[param.name] is None, where  # click passes nothing: the command resolves it
            assert stated and stated.group(1) == str(task_default(param.name, task)), where
        elif task and stated and given.get(param.name) is not None:
            # click's default is the library's own, and the config keeps it
            field = RENAMED.get(param.name, param.name)
            assert getattr(library, field) == given[param.name], where


@pytest.mark.parametrize("task", sorted(TASK_DEFAULTS["max_seq_length"]))
def test_the_shown_length_is_the_one_the_config_resolves(task):
    """The config, not the table, resolves an omitted --max-seq-length: the two agree."""
    assert FinetuneConfig(task=task, model=".", out="x").max_seq_length == task_default("max_seq_length", task)


def test_embed_help_names_its_own_metric_and_split():
    group = bertmodel_main.commands["finetune"]
    shown = " ".join(CliRunner().invoke(group, ["embed", "--help"]).output.split())
    assert "Eval metric picking the model kept in RUN/hf. [default: ndcg@10]" in shown
    assert "Split to evaluate on. [default: validation; a BEIR directory's dev, else test]" in shown
    assert "pearson" not in shown
