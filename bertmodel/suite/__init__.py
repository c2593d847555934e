"""`bertmodel eval-suite`: score one checkpoint on a suite of fine-tuning tasks, each over
a grid of hyperparameters and several seeds, as the BERT paper reports GLUE and SQuAD.

spec.py reads and checks the suite file (TOML; shipped suites live in suites/), runner.py
runs every task x grid point x seed as an ordinary `bertmodel finetune` subprocess and
skips finished ones, report.py picks each task's best grid point by its mean over seeds
and writes the table, results.json and the chart; run_suite.py runs a suite from end to
end with the three.
"""
from bertmodel.suite.run_suite import SuiteConfig, eval_suite, plan_lines, prepare
from bertmodel.suite.report import format_table
from bertmodel.suite.spec import Suite, TaskSpec, load_suite, resolve_suite, shipped_suites

__all__ = ["Suite", "SuiteConfig", "TaskSpec", "eval_suite", "format_table", "load_suite", "plan_lines", "prepare",
           "resolve_suite", "shipped_suites"]
