"""The import rules of DESIGN.md ("Where things live"), read from the source:

- no two modules import each other, directly or around a circle, counting every import:
  also one inside a function or under `if TYPE_CHECKING:` (two modules that know each
  other are a circle however the import is hidden);
- bertprep never imports torch or bertmodel (a data-prep node installs neither);
- a library module never imports a CLI module, and a command module never imports the
  group that lists it;
- an executor knows nothing of what its tasks do;
- no folder of bertmodel imports a folder that imports it back (a room's arrows run one
  way: the shared piece lives in the lower room, e.g. the embedder in retrieval/, below
  the tasks that train it);
- each package keeps at most 8 modules beside its subpackages, and every subpackage
  says in its `__init__.py` what it is.

Each rule is checked on the real tree, and also on a planted violation, so a rule that
has stopped seeing anything fails here too."""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("bertprep", "bertmodel")
TOP_LEVEL_LIMIT = 8


def module_files(root: pathlib.Path = ROOT) -> dict[str, pathlib.Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imported_names(path: pathlib.Path, module: str, modules: dict | None = None) -> set[str]:
    """Every dotted name an import in `path` brings in, wherever the import stands.
    `from pkg import sub` names `pkg.sub` when that is one of `modules`, else `pkg`
    (a name taken from the package face)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    modules = modules or {}
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1 steps
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                         for alias in node.names)
    return names


def import_graph(modules: dict[str, pathlib.Path]) -> dict[str, set[str]]:
    """module -> the modules of ours it imports (the deepest module each import names)."""
    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    return {module: {t for t in map(resolve, imported_names(path, module, modules)) if t and t != module}
            for module, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def is_cli(module: str) -> bool:
    return module.split(".")[1:2] == ["cli"] or module.endswith("__main__") or module == "bertmodel.entry"


def rule_breakers(modules: dict[str, pathlib.Path]) -> list[str]:
    """Every broken rule of the module docstring, one line each (empty: all hold)."""
    graph = import_graph(modules)
    broken = [f"import cycle: {' -> '.join(c)}" for c in cycles(graph)]
    for module, path in modules.items():
        names = imported_names(path, module, modules)
        if module.startswith("bertprep"):
            bad = sorted(n for n in names if n.split(".")[0] in ("torch", "bertmodel"))
            if bad:
                broken.append(f"{module} imports {bad[0]} (bertprep needs neither torch nor bertmodel)")
        if not is_cli(module):
            cli = sorted(t for t in graph[module] if is_cli(t))
            if cli:
                broken.append(f"{module} (a library module) imports the CLI module {cli[0]}")
    return broken


def test_the_tree_keeps_every_import_rule():
    assert rule_breakers(module_files()) == []


def test_a_planted_cycle_and_a_planted_torch_import_are_caught(tmp_path):
    """The checks themselves: a copy of the tree with a cycle hidden in a function and
    under TYPE_CHECKING, torch imported in bertprep, and a library importing a CLI."""
    import shutil

    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    assert rule_breakers(module_files(tmp_path)) == []
    schema = tmp_path / "bertprep" / "shards" / "schema.py"
    schema.write_text(schema.read_text() + "\n\ndef _planted():\n    from bertprep.shards import manifest\n")
    found = rule_breakers(module_files(tmp_path))
    assert any(line.startswith("import cycle:") and "bertprep.shards.schema" in line for line in found), found
    schema.write_text(schema.read_text().replace("def _planted():\n    from bertprep.shards import manifest\n",
                                                 "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                 "    from bertprep.shards.manifest import pairing\n"))
    assert any("bertprep.shards.schema" in line for line in rule_breakers(module_files(tmp_path)))
    schema.write_text(schema.read_text().replace("    from bertprep.shards.manifest import pairing\n",
                                                 "    import torch\n"))
    assert rule_breakers(module_files(tmp_path)) == ["bertprep.shards.schema imports torch (bertprep needs "
                                                     "neither torch nor bertmodel)"]
    writer = tmp_path / "bertprep" / "storage" / "lock.py"
    writer.write_text(writer.read_text() + "\nfrom bertprep.cli.kit import user_errors  # noqa\n")
    assert "bertprep.storage.lock (a library module) imports the CLI module bertprep.cli.kit" in \
        rule_breakers(module_files(tmp_path))


def folder_graph(modules: dict[str, pathlib.Path], package: str = "bertmodel") -> dict[str, set[str]]:
    """Each folder of `package` (bertmodel/*/) -> the other folders its modules import."""
    def folder(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if parts[0] == package and len(parts) > 1 and modules[module].parent.name == parts[1] \
            else None

    graph: dict[str, set[str]] = {}
    for module, targets in import_graph(modules).items():
        if (source := folder(module)) is not None:
            graph.setdefault(source, set()).update(f for f in map(folder, targets) if f not in (None, source))
    return graph


def mutual_folders(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The folder pairs that import each other, each pair once, sorted."""
    return sorted((a, b) for a in graph for b in graph[a] if a < b and a in graph.get(b, ()))


def test_no_folder_imports_a_folder_that_imports_it_back():
    graph = folder_graph(module_files())
    assert {"cli", "data", "metrics", "model", "retrieval", "tasks", "training"} <= set(graph)  # it sees the rooms
    assert "retrieval" in graph["tasks"] and "tasks" not in graph["retrieval"]  # the embedder is below the tasks
    assert mutual_folders(graph) == []


def test_a_planted_folder_circle_is_caught(tmp_path):
    import shutil

    shutil.copytree(ROOT / "bertmodel", tmp_path / "bertmodel", ignore=shutil.ignore_patterns("__pycache__"))
    embedder = tmp_path / "bertmodel" / "retrieval" / "embedder.py"
    embedder.write_text(embedder.read_text() + "\n\ndef _planted():\n    from bertmodel.tasks import finetuning\n")
    assert mutual_folders(folder_graph(module_files(tmp_path))) == [("retrieval", "tasks")]


def test_command_modules_never_import_the_group_that_lists_them():
    modules = module_files()
    for group, commands in (("bertprep.cli", "bertprep.cli."), ("bertmodel.cli", "bertmodel.cli.")):
        for module in modules:
            if module.startswith(commands) and module != f"{group}.__main__":
                assert group not in import_graph(modules)[module], f"{module} imports {group} (a circle)"


def test_executors_know_nothing_of_bert():
    modules = module_files()
    for module in ("bertprep.executors.local", "bertprep.executors.ray", "bertprep.executors.base"):
        used = {t for t in import_graph(modules)[module] if t.startswith("bertprep.")}
        assert used <= {"bertprep.errors", "bertprep.executors.base"}, (module, used)


def test_each_package_keeps_its_top_level_short_and_says_what_each_folder_is():
    for package in PACKAGES:
        top = sorted(p.name for p in (ROOT / package).glob("*.py"))
        assert len(top) <= TOP_LEVEL_LIMIT, (package, top)
        for folder in sorted(p for p in (ROOT / package).iterdir() if p.is_dir() and p.name != "__pycache__"):
            init = folder / "__init__.py"
            assert init.is_file(), f"{folder} has no __init__.py"
            assert ast.get_docstring(ast.parse(init.read_text())), f"{init} does not say what the folder is"
