# capsule-lab: the two commands are `make book` and `make test` (see README.md).
#
# Everything is installed into ./.venv; nothing is registered globally. Stamp files under
# .venv/ and the data root make every step idempotent: a second `make setup` does nothing.

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip

# The torch pins for this machine kind (x86_64, Python 3.11: both wheels lie on local disk).
# Elsewhere override, e.g. `make setup TORCH_SPEC="torch==2.9.1 torchvision==0.24.1"`
# or a CPU build: `make setup TORCH_SPEC="torch torchvision --index-url <your torch CPU index>"`.
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1

# Vendored front-end code for the book (no CDN at page-load time). Versions: html-manager 1.0.x
# is the one that matches ipywidgets 8.1; MathJax 3 is what Sphinx 7 configures.
HTML_MANAGER_VERSION ?= 1.0.15
REQUIREJS_VERSION    ?= 2.3.8
MATHJAX_VERSION      ?= 3.2.2
# axe-core: the WCAG 2.1 A/AA rules the browser test (tests/test_book.py) runs on every page; vendored in tests/vendor.
AXE_CORE_VERSION     ?= 4.14.1
AXE_DIR := tests/vendor/axe-core
VENDOR_DIR := book/_static/vendor
VENDOR_FILES := $(VENDOR_DIR)/require.js $(VENDOR_DIR)/html-manager/embed-amd.js \
                $(VENDOR_DIR)/mathjax/tex-chtml.js

# Data root (same default as capsule_lab: ./data, or $CAPSULE_LAB_DATA).
DATA_DIR   := $(if $(CAPSULE_LAB_DATA),$(CAPSULE_LAB_DATA),data)
FASHION_DEB_DIR := /usr/share/datasets/fashion-mnist

# Deterministic, CPU-sized runs for tests and for re-executing the committed notebooks.
# Kernels run with the notebook's folder as cwd, so the data root is passed as an absolute path.
RUN_ENV := CAPSULE_LAB_PROFILE=quick CAPSULE_LAB_DATA=$(abspath $(DATA_DIR)) PYTHONHASHSEED=0
# Unit tests: two xdist workers of one thread each.
UNIT_ENV := $(RUN_ENV) OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
# Notebooks: one at a time, with the thread count the quick profile is timed for (setup() reads
# OMP_NUM_THREADS) and the CPU kernels torch picks for this processor, unless NB_KERNELS restricts them.
NB_THREADS ?= 2
NB_KERNELS ?=
# OMP_WAIT_POLICY=PASSIVE: idle OpenMP threads sleep instead of spinning, so a notebook on a shared, busy machine
# (CI, or other jobs) does not slow down many-fold; it changes no result.
NB_ENV = $(RUN_ENV) OMP_NUM_THREADS=$(NB_THREADS) MKL_NUM_THREADS=$(NB_THREADS) OMP_WAIT_POLICY=PASSIVE $(NB_KERNELS)
# AVX2-only kernels in ATen, oneDNN and MKL: other code paths and summation orders than AVX-512 machines
# take, so a notebook passing with and without them shows its tolerance bands cover a change of processor.
AVX2_KERNELS := ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2

# The torch stamp's name carries a hash of TORCH_SPEC, so a new spec re-runs the torch install.
TORCH_SPEC_HASH := $(shell printf '%s' '$(TORCH_SPEC)' | cksum | cut -d' ' -f1)
TORCH_STAMP := $(VENV)/.stamp-torch-$(TORCH_SPEC_HASH)
SETUP_STAMP := $(VENV)/.stamp-setup
DATA_STAMP  := $(DATA_DIR)/.stamp-capsule-lab-data

NOTEBOOKS := $(sort $(wildcard chapters/*.ipynb solutions/*.ipynb))
# NB_WORKERS notebooks at a time (pytest-xdist, each notebook whole on one worker). With 2-thread kernels, one at a
# time: two of them oversubscribe 2 cores (chapters 02 + 03: 81 s one at a time, 82 s two at a time). A 2-thread
# kernel leaves much of the second core idle, though, so `make test` runs its two passes (2 threads; AVX2 kernels
# and 1 thread) side by side, one notebook at a time each: all 14 notebooks both ways in 368 s, against 592 s for
# the 2-thread pass and then the 1-thread pass two notebooks at a time (measured here and in CI, 2026-11-23).
NB_WORKERS ?= 1
NB_XDIST = $(if $(filter-out 1,$(NB_WORKERS)),-n $(NB_WORKERS) --dist loadfile,)
# Time limits, so that a stall fails loudly instead of eating CI's 90 minutes: a cell that hangs is interrupted
# after CELL_TIMEOUT seconds (the slowest cell, chapter 03's training, takes ~40 s); a notebook's remaining cells
# fail once it has run NOTEBOOK_TIME_LIMIT seconds (the slowest notebook takes ~60 s); a whole pass is
# interrupted after NOTEBOOK_PASS_LIMIT seconds, and pytest still prints what ran.
CELL_TIMEOUT        ?= 300
NOTEBOOK_TIME_LIMIT ?= 600
NOTEBOOK_PASS_LIMIT ?= 1800
NBVAL_ARGS := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
              --nbval-cell-timeout=$(CELL_TIMEOUT) -p tests.nbval_time_limit --notebook-time-limit=$(NOTEBOOK_TIME_LIMIT) \
              -p no:cacheprovider
JB_BUILD := $(VENV)/bin/jupyter-book build . -W -n --keep-going

# Run `apt-get update` at most once (per 12 h) before an install, and only as root.
define APT_UPDATE_ONCE
mkdir -p .make; \
if [ -z "$$(find .make/apt-updated -mmin -720 2>/dev/null)" ]; then \
  DEBIAN_FRONTEND=noninteractive apt-get update && touch .make/apt-updated; fi
endef

.PHONY: help setup data bubblewrap chromium widgets-js axe-js book sync-url test test-fast test-unit test-notebooks test-portable notebooks clean distclean

help:
	@echo "make book        set up .venv and build the book into _build/html"
	@echo "make test        set up, fetch data, run unit + notebook (nbval) + book/browser tests; the notebooks"
	@echo "                 run twice: with this CPU's kernels and 2 threads, then AVX2-only kernels and 1 thread"
	@echo "make test-fast   the unit and property tests alone (no notebooks, grading kernels, book or browser): < 2 min"
	@echo "make test-portable  the notebooks with AVX2-only kernels, with 1 thread, and with both"
	@echo "make setup       create .venv and install capsule-lab[book,test] (TORCH_SPEC='$(TORCH_SPEC)')"
	@echo "make data        fetch the offline datasets into $(DATA_DIR)/"
	@echo "make notebooks   re-execute chapters/ and solutions/ (quick profile), regenerate exercises/"
	@echo "make widgets-js  refresh the vendored widget/MathJax JavaScript in $(VENDOR_DIR)/"
	@echo "make axe-js      refresh the vendored axe-core (accessibility rules of the browser test) in $(AXE_DIR)/"
	@echo "make sync-url    write _config.yml's repository URL into the notebooks, README and book pages"
	@echo "                 (SYNC_PATHS='chapters book' limits it; SYNC_ARGS=--check only reports)"
	@echo "make clean       remove build and test caches (keeps .venv and data)"

# ---------------------------------------------------------------- setup
setup: $(SETUP_STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(TORCH_STAMP): | $(PY)
	$(PIP) install $(TORCH_SPEC)
	@rm -f $(VENV)/.stamp-torch-*
	@echo '$(TORCH_SPEC)' > $@

$(SETUP_STAMP): pyproject.toml $(TORCH_STAMP)
	$(PIP) install -e '.[book,test]'
	@touch $@

# ---------------------------------------------------------------- data
data: $(DATA_STAMP)

$(DATA_STAMP): $(SETUP_STAMP)
	@if [ ! -d $(FASHION_DEB_DIR) ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    $(APT_UPDATE_ONCE) && DEBIAN_FRONTEND=noninteractive apt-get install -y dataset-fashion-mnist; \
	  else \
	    echo "note: $(FASHION_DEB_DIR) is missing; as root run:"; \
	    echo "  apt-get update && apt-get install -y dataset-fashion-mnist"; \
	  fi; \
	fi
	CAPSULE_LAB_DATA=$(abspath $(DATA_DIR)) $(VENV)/bin/capsule-lab data
	@mkdir -p $(DATA_DIR) && touch $@

# ---------------------------------------------------------------- bubblewrap (the grader's sandbox)
bubblewrap:
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  $(APT_UPDATE_ONCE) && DEBIAN_FRONTEND=noninteractive apt-get install -y bubblewrap; \
	else \
	  echo "note: bubblewrap (bwrap) is missing; capsule-lab grade stops without it (or use --no-sandbox)."; \
	  echo "  As root run: apt-get update && apt-get install -y bubblewrap"; \
	fi

# ---------------------------------------------------------------- chromium (browser test)
chromium:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
	  $(APT_UPDATE_ONCE) && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; \
	else \
	  echo "note: /usr/bin/chromium is missing; the browser test will fail. As root run:"; \
	  echo "  apt-get update && apt-get install -y chromium"; \
	fi

# ---------------------------------------------------------------- vendored JS
# The vendored files are committed; this target refreshes them from the npm registry.
widgets-js:
	@set -euo pipefail; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	( cd "$$tmp" && npm pack --silent @jupyter-widgets/html-manager@$(HTML_MANAGER_VERSION) \
	    requirejs@$(REQUIREJS_VERSION) mathjax@$(MATHJAX_VERSION) >/dev/null ); \
	for t in "$$tmp"/*.tgz; do d="$${t%.tgz}"; mkdir -p "$$d"; tar -xzf "$$t" -C "$$d"; done; \
	hm="$$tmp/jupyter-widgets-html-manager-$(HTML_MANAGER_VERSION)/package"; \
	rq="$$tmp/requirejs-$(REQUIREJS_VERSION)/package"; \
	mj="$$tmp/mathjax-$(MATHJAX_VERSION)/package"; \
	rm -rf $(VENDOR_DIR); mkdir -p $(VENDOR_DIR)/html-manager $(VENDOR_DIR)/mathjax; \
	cp "$$rq/require.js" $(VENDOR_DIR)/require.js; \
	cp "$$hm/dist/embed-amd.js" "$$hm"/dist/*.woff2 "$$hm"/dist/*.woff $(VENDOR_DIR)/html-manager/; \
	cp "$$mj/es5/tex-chtml.js" "$$mj/LICENSE" $(VENDOR_DIR)/mathjax/; \
	mkdir -p $(VENDOR_DIR)/mathjax/output/chtml/fonts $(VENDOR_DIR)/mathjax/input/tex; \
	cp -r "$$mj/es5/output/chtml/fonts/woff-v2" $(VENDOR_DIR)/mathjax/output/chtml/fonts/; \
	cp -r "$$mj/es5/input/tex/extensions" $(VENDOR_DIR)/mathjax/input/tex/; \
	{ echo "Vendored by 'make widgets-js' from the npm registry (do not edit by hand):"; \
	  echo "  require.js            requirejs@$(REQUIREJS_VERSION)  (MIT)"; \
	  echo "  html-manager/         @jupyter-widgets/html-manager@$(HTML_MANAGER_VERSION)  (BSD-3-Clause):"; \
	  echo "                        dist/embed-amd.js and its Font Awesome web fonts (OFL-1.1)"; \
	  echo "  mathjax/              mathjax@$(MATHJAX_VERSION)  (Apache-2.0, see mathjax/LICENSE):"; \
	  echo "                        es5/tex-chtml.js, CHTML woff-v2 fonts, TeX extensions"; } \
	  > $(VENDOR_DIR)/VENDORED.txt
	@du -sh $(VENDOR_DIR)

$(VENDOR_FILES) &:
	$(MAKE) widgets-js


# axe-core for the browser test's accessibility check (committed like the book's vendored JavaScript).
axe-js:
	@set -euo pipefail; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	( cd "$$tmp" && npm pack --silent axe-core@$(AXE_CORE_VERSION) >/dev/null && tar -xzf axe-core-*.tgz ); \
	rm -rf $(AXE_DIR); mkdir -p $(AXE_DIR); \
	cp "$$tmp/package/axe.min.js" "$$tmp/package/LICENSE" $(AXE_DIR)/; \
	echo "Vendored by 'make axe-js' from the npm registry (do not edit by hand): axe-core@$(AXE_CORE_VERSION) (MPL-2.0)" \
	  > $(AXE_DIR)/VENDORED.txt
# ---------------------------------------------------------------- book
book: $(SETUP_STAMP) $(VENDOR_FILES)
	$(JB_BUILD)
	@echo "book: _build/html/index.html"

# ---------------------------------------------------------------- repository URL
# The repository URL is set once, in _config.yml (repository.url, repository.branch); this writes it into
# the Colab install lines and Colab links of the notebooks, README.md and book/ (SYNC_PATHS: some of them).
SYNC_PATHS ?=
SYNC_ARGS  ?=
sync-url: $(SETUP_STAMP)
	$(PY) scripts/sync_repository_url.py $(SYNC_ARGS) $(SYNC_PATHS)

# ---------------------------------------------------------------- tests
# 1. unit, property, grading and book/browser tests (tests/); 2. nbval on chapters/ and solutions/, once with
# this processor's kernels and 2 threads, once with AVX2-only kernels and 1 thread: exact outputs must match
# digit for digit both times, numbers from training must stay within their bands (CONTRIBUTING.md).
# All stages always run (so one failure does not hide another); the exit code is the first failure.
test: $(SETUP_STAMP) data bubblewrap chromium $(VENDOR_FILES)
	@status=0; \
	$(MAKE) --no-print-directory test-unit || status=$$?; \
	log=$$(mktemp); \
	echo "== the notebooks twice, at the same time: this CPU's kernels with 2 threads (shown as it runs), and"; \
	echo "   AVX2-only CPU kernels with 1 thread (shown after)"; \
	$(MAKE) --no-print-directory test-notebooks NB_KERNELS="$(AVX2_KERNELS)" NB_THREADS=1 > $$log 2>&1 & avx2=$$!; \
	$(MAKE) --no-print-directory test-notebooks || { s=$$?; [ $$status -ne 0 ] || status=$$s; }; \
	wait $$avx2 || { s=$$?; [ $$status -ne 0 ] || status=$$s; }; \
	echo "== the notebooks with AVX2-only CPU kernels and 1 thread"; cat $$log; rm -f $$log; \
	exit $$status

test-unit: $(SETUP_STAMP)
	$(UNIT_ENV) $(PY) -m pytest tests -n 2 --dist loadgroup -p no:cacheprovider --durations=40

# The inner loop: the unit and property tests without the marks `notebook` (kernels, grading), `book` (the build and
# the browser) and `slow` (paper-size networks, timings); `make test` runs them all. Under 2 minutes here.
FAST_MARKS := not notebook and not book and not slow
test-fast: $(SETUP_STAMP) data bubblewrap
	$(UNIT_ENV) $(PY) -m pytest tests -n 2 --dist loadgroup -p no:cacheprovider -q -m "$(FAST_MARKS)" --durations=5

# Each pass saves the chapters' training checkpoints (capsule_lab.course.checkpoints) in a folder of its own, removed
# after: a run must train, not load what an earlier run saved, and the two passes of `make test` must not share one.
test-notebooks: $(SETUP_STAMP)
	@if [ -z "$(NOTEBOOKS)" ]; then echo "error: no notebooks in chapters/ or solutions/"; exit 1; fi
	@checkpoints=$$(mktemp -d); echo "checkpoints of this pass in $$checkpoints (removed after)"; \
	CAPSULE_LAB_CHECKPOINTS=$$checkpoints $(NB_ENV) timeout -s INT -k 60 $(NOTEBOOK_PASS_LIMIT) \
	  $(PY) -m pytest $(NBVAL_ARGS) $(NB_XDIST) $(NOTEBOOKS); \
	status=$$?; rm -rf "$$checkpoints"; exit $$status

# The notebooks under each change of CPU kernels and thread count on its own, then both together.
test-portable: $(SETUP_STAMP) data
	@status=0; \
	echo "== notebooks with AVX2-only CPU kernels and 2 threads"; \
	$(MAKE) --no-print-directory test-notebooks NB_KERNELS="$(AVX2_KERNELS)" NB_THREADS=2 || status=1; \
	echo "== notebooks with this CPU's kernels and 1 thread"; \
	$(MAKE) --no-print-directory test-notebooks NB_THREADS=1 || status=1; \
	echo "== notebooks with AVX2-only CPU kernels and 1 thread"; \
	$(MAKE) --no-print-directory test-notebooks NB_KERNELS="$(AVX2_KERNELS)" NB_THREADS=1 || status=1; \
	exit $$status

# ---------------------------------------------------------------- notebooks
notebooks: $(SETUP_STAMP) data
	@if [ -z "$(NOTEBOOKS)" ]; then echo "error: no notebooks in chapters/ or solutions/"; exit 1; fi
	@checkpoints=$$(mktemp -d); \
	printf '%s\n' $(NOTEBOOKS) | CAPSULE_LAB_CHECKPOINTS=$$checkpoints $(NB_ENV) xargs -P 1 -I{} \
	  $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=$(CELL_TIMEOUT) \
	  --ExecutePreprocessor.record_timing=False {}; \
	status=$$?; rm -rf "$$checkpoints"; exit $$status
	$(VENV)/bin/capsule-lab captions $(NOTEBOOKS)
	$(VENV)/bin/capsule-lab assign

# ---------------------------------------------------------------- clean
clean:
	rm -rf _build .make .pytest_cache .hypothesis reports
	find . -path ./.venv -prune -o -name __pycache__ -type d -print0 | xargs -0 rm -rf
	find . -path ./.venv -prune -o -name .ipynb_checkpoints -type d -print0 | xargs -0 rm -rf

distclean: clean
	rm -rf $(VENV) *.egg-info $(DATA_DIR)
