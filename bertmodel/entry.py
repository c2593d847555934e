"""The `bertmodel` console script: says which extra to install when PyTorch is missing
(bertprep alone, e.g. on a data-prep node, installs without it), then runs the CLI."""
from __future__ import annotations

import importlib.util
import sys

# What bertmodel needs beyond bertprep's own dependencies (pyproject.toml, extra "model").
MODEL_PACKAGES = {"torch": "PyTorch", "safetensors": "safetensors"}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or blocked installation counts as missing
        return False


def missing_model_packages() -> list[str]:
    return [name for module, name in MODEL_PACKAGES.items() if not _installed(module)]


def main() -> None:
    missing = missing_model_packages()
    if missing:
        sys.stderr.write(f"Error: bertmodel needs {' and '.join(missing)}, which "
                         f"{'is' if len(missing) == 1 else 'are'} not installed: pip install 'bertprep[model]'\n")
        sys.exit(1)
    from bertmodel.cli import main as cli

    cli()


if __name__ == "__main__":
    main()
