"""Every command of both CLIs has a summary, help on every option and an example."""
import click
import pytest
from click.testing import CliRunner

from bertmodel.cli import main as bertmodel_main
from bertprep.cli import main as bertprep_main

COMMANDS = [(bertprep_main, name) for name in bertprep_main.commands] + [
    (bertmodel_main, name) for name in bertmodel_main.commands
] + [(bertmodel_main.commands["finetune"], name) for name in bertmodel_main.commands["finetune"].commands]


def test_the_command_sets():
    assert set(bertprep_main.commands) == {"train-tokenizer", "encode", "build-shards", "inspect", "stdlib-corpus"}
    assert set(bertmodel_main.commands) == {"pretrain", "finetune", "evaluate", "predict", "export-hf", "fill-mask",
                                            "demo", "plot"}
    assert set(bertmodel_main.commands["finetune"].commands) == {"classify", "qa"}


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
