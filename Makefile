# The two commands a new user runs: `make run` and `make test`.
# Both create .venv when it is missing; the stamp file makes a second call fast.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-fast lint bench setup clean debs

# Debian packages the bundled corpora read: the Bible's SWORD modules, exported by diatheke, and
# the speech corpus's voices (espeak-ng, flite; Festival and its English voices, for evaluation
# only) and resampler (sox); PostgreSQL for the sweep's shared study; and the headless browser
# the test of `seqc serve`'s page drives (chromium, chromium-driver). Installed with setup when
# missing and running as root; otherwise setup says what to install.
DEBS := diatheke sword-text-kjv sword-text-sparv espeak-ng flite sox festival festvox-kallpc16k \
	festvox-kdlpc16k festvox-us-slt-hts chromium chromium-driver postgresql

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@$(MAKE) --no-print-directory debs
	touch $(STAMP)

debs:
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get install -y -q --no-install-recommends $$missing >/dev/null \
		|| echo "could not install$$missing; the Bible and speech corpora and the page's test need them:" \
			"apt-get install -y$$missing"; \
	else \
		echo "note: the Bible corpora (seqc data prepare bible-en-es | english-words) and the" \
		"speech corpus (seqc data prepare spoken-numbers) and the test of seqc serve's page" \
		"need the Debian packages$$missing:" \
		"sudo apt-get install -y$$missing"; \
	fi

setup: $(STAMP)

run: $(STAMP)
	@for f in examples/*/*.seq; do $(BIN)/seqc check $$f || exit $$?; done
	$(BIN)/seqc data prepare shakespeare
	$(BIN)/seqc train examples/lm/shakespeare.seq -e lm.shakespeare.quick \
		--run-dir runs/lm.shakespeare.quick/$$(date +%Y%m%d-%H%M%S) --prompt "To be, or not"

# Two pytest workers, a test file each at a time (module fixtures are trained once): most of a
# test's time is single-threaded tracing and compiling, so two cores halve much of it. XLA's
# compiled programs are kept between runs in .cache/xla-tests (tests/support/xla_cache.py).
# xdist hands out the files with the most tests first (its --loadscope-reorder); handing out
# the longest first ran the process groups side by side and took more CPU and longer (692-749 s
# against 657 s, measured). The 25 slowest tests are listed at the end: the suite must stay
# under 10 minutes.
test: $(STAMP)
	$(BIN)/ruff check seqc tests bench
	$(BIN)/ruff format --check seqc tests bench
	$(BIN)/python -m pytest -n 2 --dist loadfile --durations=25

# The framework-free tests (tests/frontend and the framework-free files of tests/compiler,
# tests/data and tests/project), for the edit loop: the other files are not even imported, and
# the run fails if an ML framework is loaded (tests/conftest.py).
test-fast: $(STAMP)
	SEQC_TEST_FAST=1 $(BIN)/python -m pytest -n 2 -m "not framework" --durations=10

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
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis .cache/xla-tests
