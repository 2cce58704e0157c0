# The README's two commands: `make demo` (set up + run the main job) and `make test` (set up + tests).
VENV   := .venv
STAMP  := $(VENV)/.zoorank-installed
PYTEST_ARGS ?=
#: pytest-xdist workers for `make test` (test files are the unit of work; 0 runs in one process)
TEST_WORKERS ?= 2

export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER := 0
export RAY_USAGE_STATS_ENABLED := 0
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: install demo test lint docs bench clean lock

$(STAMP): pyproject.toml requirements.lock scripts/install.sh scripts/torchvision_cpu_fix.py
	bash scripts/install.sh dev
	touch $@

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/zoorank demo

test: $(STAMP)
	RAY_DATA_DISABLE_PROGRESS_BARS=1 $(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile \
		$(PYTEST_ARGS)

# ruff, then the import contracts of pyproject.toml ([tool.importlinter]: layers, stages side by side,
# no cycle, a pure metrics layer).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-logo

# the documentation site (mkdocs.yml) into site/; strict: a broken link or reference is an error
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: $(STAMP)
	for b in benchmarks/performance/bench_*.py; do $(VENV)/bin/python $$b || exit 1; done

# requirements.lock: what install.sh installs, pinned; run after changing pyproject's dependencies
# (needs uv on PATH or in .venv: `pip install uv`)
lock:
	bash scripts/lock.sh

clean:
	rm -rf $(VENV) zoorank-demo zoorank-store .pytest_cache site
