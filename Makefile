# Two commands set everything up on a fresh machine (Python 3.10+ and the package
# registries are all they need):
#   make demo   tokenizer -> shards -> a short CPU pretraining run on a built-in corpus
#   make test   the test suite
PYTHON ?= python3
VENV ?= .venv
# The torch to install when the venv has none (a range in pyproject.toml would pull
# pip's default build, on Linux a multi-GB CUDA one). Override with pip arguments, e.g.
#   make demo TORCH="torch --index-url https://download.pytorch.org/whl/cpu"
# or TORCH= to install nothing here and let pip resolve torch>=2.4.
TORCH ?= torch==2.13.0
DEMO_OUT ?= demo-output
BIN := $(VENV)/bin

.PHONY: demo test bench install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	@if [ -n "$(TORCH)" ] && ! $(BIN)/python -c "import torch" 2>/dev/null; then \
		echo "Installing $(TORCH)"; $(BIN)/python -m pip install --quiet $(TORCH); fi
	$(BIN)/python -m pip install --quiet -e ".[model,ray,fast,test]"
	@touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/bertmodel demo --out $(DEMO_OUT)

# TOKENIZERS_PARALLELISM=true as many transformers users set it: the suite must pass
# (and not hang) when the tokenizers thread pool exists before a build starts workers.
# Two pytest-xdist workers, one per core (tests/conftest.py: a thread each, slow tests first).
test: $(VENV)/.installed
	TOKENIZERS_PARALLELISM=true $(BIN)/python -m pytest -q -n 2 --dist loadgroup

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/bench_train_tokenizer.py
	$(BIN)/python benchmarks/bench_build_shards.py
	$(BIN)/python benchmarks/bench_train_step.py

clean:
	rm -rf $(VENV) $(DEMO_OUT) .pytest_cache .hypothesis
