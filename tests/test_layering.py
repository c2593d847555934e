"""The import rules of DESIGN.md ("Where things live"), read from the source: command
modules never import the group that lists them, libraries never import a CLI, and an
executor knows nothing of what its tasks do."""
from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "bertprep"
CLI_MODULES = {"cli", "cli_corpus", "cli_options", "cli_shards", "cli_tokenizer", "clikit", "__main__"}


def imports(path: pathlib.Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_no_module_but_the_entry_point_imports_the_cli_group():
    for path in PACKAGE.glob("*.py"):
        if path.stem not in ("cli", "__main__"):
            assert "bertprep.cli" not in imports(path), f"{path.name} imports bertprep.cli (a circle)"


def test_libraries_never_import_a_cli_module():
    for path in PACKAGE.glob("*.py"):
        if path.stem not in CLI_MODULES:
            cli = {m for m in imports(path) if m.startswith("bertprep.cli")}
            assert not cli, f"{path.name} imports {sorted(cli)}"


def test_executors_know_nothing_of_bert():
    for name in ("executor.py", "ray_executor.py"):
        used = {m for m in imports(PACKAGE / name) if m.startswith("bertprep.")}
        assert used <= {"bertprep.errors", "bertprep.errors.BertprepError", "bertprep.executor",
                        "bertprep.executor.ExecutorReport", "bertprep.executor.TaskCost", "bertprep.executor.next_batch",
                        "bertprep.ray_executor", "bertprep.ray_executor.RayExecutor"}, (name, used)
