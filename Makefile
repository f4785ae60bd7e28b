# The two commands a new user runs: `make run` and `make test`.
# Both create .venv when it is missing; the stamp file makes a second call fast.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench setup clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	@for f in examples/*/*.seq; do $(BIN)/seqc check $$f || exit $$?; done
	$(BIN)/seqc data prepare shakespeare
	$(BIN)/seqc train examples/lm/shakespeare.seq -e lm.shakespeare.quick \
		--run-dir runs/lm.shakespeare.quick/$$(date +%Y%m%d-%H%M%S) --prompt "To be, or not"

test: $(STAMP)
	$(BIN)/ruff check seqc tests bench
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check seqc tests bench
	$(BIN)/ruff format --check seqc tests bench

bench: $(STAMP)
	$(BIN)/python bench/frontend.py
	$(BIN)/python bench/train_throughput.py
	$(BIN)/python bench/export.py
	$(BIN)/python bench/placement.py
	$(BIN)/python bench/parity.py
	$(BIN)/python bench/chaos.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
