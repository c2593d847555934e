"""`bertmodel eval-suite`: parse options, build a SuiteConfig, call the library
(bertmodel.suite), print the table. The suite file's options are checked against the
`finetune COMMAND` options here, so a typo fails before the first run, not in every one."""
from __future__ import annotations

import sys

import click

from bertmodel.cli.finetune import MODEL_SOURCE
from bertmodel.cli.finetune import finetune as finetune_group
from bertmodel.cli.group import CONTEXT_SETTINGS, DIR, main
from bertmodel.suite import SuiteConfig, eval_suite, format_table, plan_lines, shipped_suites
from bertmodel.suite.spec import check_finetune_field
from bertprep.cli.kit import progress_option, user_errors


class CommaList(click.ParamType):
    """"1,2,3" -> [1, 2, 3] (or a list of names)."""

    def __init__(self, item=str):
        self.item = item
        self.name = "INT,..." if item is int else "NAME,..."

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        parts = [p.strip() for p in str(value).split(",") if p.strip()]
        if not parts:
            self.fail("give at least one", param, ctx)
        try:
            return [self.item(p) for p in parts]
        except ValueError:
            self.fail(f"{value!r}: comma-separated {'integers' if self.item is int else 'names'}", param, ctx)


def check_option(command: str, option: str, value) -> str | None:
    """What is wrong with `option = value` for `bertmodel finetune COMMAND`, or None."""
    problem = check_finetune_field(command, option, value)  # a FinetuneConfig field the suite leaves open
    if problem:
        return problem
    params = {p.name: p for p in finetune_group.commands[command].params if isinstance(p, click.Option)}
    param = params.get(option)
    if param is None:
        return f"not an option of `bertmodel finetune {command}`"
    if isinstance(value, list) and not param.multiple:
        return f"one value, not a list ({value!r})"
    for item in value if isinstance(value, list) else [value]:
        if param.is_flag:
            if not isinstance(item, bool):
                return f"true or false (the flag {param.opts[0]}), got {item!r}"
            continue
        try:
            param.type.convert(item, param, None)
        except click.BadParameter as exc:
            return exc.message
    return None


@main.command("eval-suite", context_settings=CONTEXT_SETTINGS)
@click.option("--model", required=True, type=MODEL_SOURCE, help="The checkpoint to score: our run/checkpoint, a "
              "transformers dir, or random:PRESET (with a tokenizer in the suite's defaults).")
@click.option("--suite", "suite", required=True, help="A suite TOML file, or a shipped suite's name: "
              + ", ".join(shipped_suites()) + ".")
@click.option("--out", required=True, type=DIR, help="Where every run, its log and the results go (one model's); "
              "rerun the same command to skip finished runs and resume the others.")
@click.option("--seeds", type=CommaList(int), help="Seeds, comma-separated (e.g. 1,2,3) [default: the suite's].")
@click.option("--data-dir", type=click.Path(exists=True, file_okay=False), help="Where the suite's relative data "
              "paths point (e.g. your full GLUE) [default: the suite's data_dir, else the current directory].")
@click.option("--tasks", type=CommaList(), help="Run only these tasks, comma-separated (e.g. rte,mrpc).")
@click.option("--dry-run", is_flag=True, help="Print the runs and their commands; run nothing.")
@progress_option
@user_errors
def eval_suite_command(model, suite, out, seeds, data_dir, tasks, dry_run, progress):
    """Score a checkpoint on a suite of fine-tuning tasks over a grid and several seeds.

    Every task x grid point x seed is an ordinary `bertmodel finetune` run in
    OUT/TASK/POINT/seed-S/ with its log beside it (seed-S.log). Each task's score is the
    mean ± sd over seeds at the grid point with the best mean on validation (the BERT
    paper's selection); the table, OUT/results.json and OUT/results.png (with the `plot`
    extra) report them and their average at this invocation's seeds, for every task with
    a finished run in OUT (--tasks updates its own rows and keeps the others). OUT holds
    one model's runs: another model is refused before anything runs. A failed run is
    named with its log, the others go on, and the exit status is 1 at the end.
    --dry-run lists the runs and their commands.

    \b
    Example:
      bertmodel eval-suite --model run/hf --suite shared-data-cpu --data-dir ../shared/data --out suite/
      bertmodel eval-suite --model run/hf --suite my-glue.toml --tasks rte,mrpc --seeds 1,2 --out glue/
    """
    cfg = SuiteConfig(model=model, suite=suite, out=out, seeds=seeds, data_dir=data_dir, tasks=tasks,
                      progress=progress)
    if dry_run:
        for line in plan_lines(cfg, check_option):
            click.echo(line)
        return
    try:
        summary = eval_suite(cfg, lambda line: click.echo(line, err=True), check_option)
    except KeyboardInterrupt:
        click.echo("interrupted: rerun the same command to skip finished runs and resume the others", err=True)
        sys.exit(130)
    click.echo(format_table(summary))
    click.echo(f"results: {summary['results']}" + (f", {summary['chart']}" if summary["chart"] else ""), err=True)
    if summary["failed"]:
        raise click.ClickException(f"{summary['failed']} of {summary['runs']} runs failed (their logs are named "
                                   "above); rerun the same command to retry them")
