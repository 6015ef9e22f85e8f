# PyTorch Internals, Rebuilt: every command sets up what it needs first (a .venv with the pinned
# requirements, retorch installed editable, Graphviz's dot), then does its job.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
NOTEBOOKS := $(wildcard notebooks/*.ipynb)
SOLUTIONS := $(wildcard solutions/*.ipynb)

# Caches live outside the repository so repeated runs reuse compiled Numba and Inductor code.
export NUMBA_CACHE_DIR ?= $(HOME)/.cache/retorch/numba
export TORCHINDUCTOR_CACHE_DIR ?= $(HOME)/.cache/retorch/inductor
# Warnings name the cell "<IPY-INPUT>" instead of a per-process /tmp path; hashing is fixed.
export IPYKERNEL_CELL_NAME := <IPY-INPUT>
export PYTHONHASHSEED := 0
export PYDEVD_DISABLE_FILE_VALIDATION := 1
export JUPYTER_PLATFORM_DIRS := 1

NBVAL := -p tools.nbval_report --nbval --nbval-current-env --nbval-sanitize-with tools/nbval_sanitize.cfg

.PHONY: help setup dot chromium book test check-fast lint pairs labs labs-check single-source \
        unit nbval nbval-portable check-wheel check-wheel-all publish-url lab-stubs wrong-answers ptx html-check bench execute clean \
        test-gpu gpu-present gpu-report gpu-wheels gpu-command

help:
	@echo "make book        build the HTML book into _build/html from the stored notebook outputs"
	@echo "make test        everything CI checks (what .ci/run runs)"
	@echo "make check-fast  lint, jupytext pairs, labs in sync, single source, fast unit tests (<60 s)"
	@echo "make test-gpu    on a machine with an NVIDIA GPU: unit tests and nbval with the simulator off"
	@echo "make gpu-wheels  download the wheels the GPU machine lacks into .whl/, print its run command"
	@echo "make gpu-command print the device run command (carry [\".whl\"]; results come back under \$$OUT)"
	@echo "make gpu-report  on a GPU machine, <= 8 min: CUDA tests, GPU benchmarks, GPU notebooks,"
	@echo "                 a table against issue 28's goals; results under \$$OUT (GPU_REPORT_DRY=1: simulator)"
	@echo "make check-wheel-all  run every chapter and solution from a built wheel, each alone (Colab)"
	@echo "make publish-url URL=https://github.com/ORG/REPO  set the repository badges and set-up cells use"
	@echo "make labs        regenerate labs/ from solutions/"
	@echo "make execute     re-run notebooks and solutions, storing fresh outputs"
	@echo "make bench       run the benchmarks, store results in bench/results, re-plot them"
	@echo "make clean       remove build outputs (keeps .venv)"

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $@

setup: $(STAMP) dot

dot:
	@tools/ensure_system.sh dot

chromium:
	@tools/ensure_system.sh chromium

# ---------------------------------------------------------------- book
book: setup
	@rm -rf _build/html
	$(VENV)/bin/jupyter-book build . --builder html -W -n --keep-going
	@echo; echo "Book built: open file://$(CURDIR)/_build/html/index.html"

html-check: chromium
	$(PY) tools/check_html.py _build/html

# ---------------------------------------------------------------- checks
lint: $(STAMP)
	$(PY) -m ruff check retorch tests tools bench
	$(PY) -m ruff format --check retorch tests tools bench

pairs: $(STAMP)
	$(PY) tools/check_pairs.py

labs: $(STAMP)
	$(PY) tools/make_labs.py

# Whoever publishes the course: set the GitHub repository once; badges and set-up cells follow.
publish-url: $(STAMP)
	@test -n "$(URL)" || { echo "usage: make publish-url URL=https://github.com/ORG/REPO [BRANCH=main]"; exit 2; }
	$(PY) tools/publish_url.py "$(URL)" $(if $(BRANCH),--branch "$(BRANCH)")

labs-check: $(STAMP)
	$(PY) tools/make_labs.py --check

single-source: $(STAMP)
	$(PY) tools/check_single_source.py

check-fast: lint pairs labs-check single-source
	$(PY) -m pytest -q -m "not slow" -x -p no:cacheprovider

unit: setup
	$(PY) -m pytest -q -p no:cacheprovider tests

nbval: setup
	$(PY) -m pytest -q -p no:cacheprovider $(NBVAL) $(NOTEBOOKS) $(SOLUTIONS)

# The stored outputs must not depend on the CPU model, vector width or thread count: re-execute
# every notebook and solution with Numba generating code for a generic x86-64 CPU on one thread
# (another machine's code generation) and require the same outputs.
nbval-portable: setup
	NUMBA_CPU_NAME=generic NUMBA_NUM_THREADS=1 \
	  $(PY) -m pytest -q -p no:cacheprovider $(NBVAL) $(NOTEBOOKS) $(SOLUTIONS)

# Colab's way (issue 32): retorch from a built wheel, each notebook alone in an empty folder, so a
# path that exists only in the checkout, or a file left out of the package, fails here.
# `make check-wheel-all` (in `make test`) runs every one: 6.5-7.7 min on 2 loaded cores, each notebook
# once; `make check-wheel` a quick subset (WHEEL_NOTEBOOKS).
WHEEL_NOTEBOOKS ?= notebooks/benchmarks.ipynb notebooks/00_overview.ipynb solutions/00_overview_lab.ipynb
check-wheel: setup
	$(PY) tools/check_wheel_install.py $(WHEEL_NOTEBOOKS)

check-wheel-all: setup
	$(PY) tools/check_wheel_install.py

lab-stubs: setup
	$(PY) tools/check_lab_stubs.py

wrong-answers: setup
	$(PY) tools/check_wrong_answers.py

# ---------------------------------------------------------------- on a GPU machine
# The same unit tests and notebooks with the CUDA simulator off: kernels run on the real GPU.
# Differences from the simulator run: none expected in outputs (kernel cells print where they
# ran, which the sanitizer rewrites); tests that need the simulator force it in a subprocess.
gpu-present: $(STAMP)
	@NUMBA_ENABLE_CUDASIM=0 $(PY) -c "from numba import cuda; import sys; \
	  sys.exit(0 if cuda.is_available() else 'make test-gpu needs an NVIDIA GPU and driver')"

test-gpu: setup gpu-present
	NUMBA_ENABLE_CUDASIM=0 $(PY) -m pytest -q -p no:cacheprovider tests
	NUMBA_ENABLE_CUDASIM=0 $(PY) -m pytest -q -p no:cacheprovider $(NBVAL) $(NOTEBOOKS) $(SOLUTIONS)
	NUMBA_ENABLE_CUDASIM=0 $(PY) tools/check_lab_stubs.py

# make gpu-report: one command for a session lent a GPU (issue 28). The GPU machine has no network
# and no .venv: it runs with its own python3, the wheels carried in .whl/ (make gpu-wheels) and
# PYTHONPATH=. (tools/gpu_report.py installs them). Run it through the device tool with
#   carry [".whl"], command: make gpu-report      (the exact line: make gpu-command)
# and copy $$OUT/bench/results/gpu/*.json into bench/results/gpu/. GPU_REPORT_DRY=1 goes through
# every step here, with the simulator and tiny sizes, writing only under $$OUT (/tmp/gpu-report-dry).
GPU_PY := $(if $(wildcard $(PY)),$(PY),python3)
GPU_WHEEL_PLATFORMS := --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
                       --platform manylinux2014_x86_64
gpu-report:
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PY) tools/gpu_report.py \
	  $(if $(GPU_REPORT_DRY),--dry)

gpu-wheels: $(STAMP)
	@mkdir -p .whl
	grep -v '^#' tools/gpu_wheels.txt | $(PY) -m pip download -q --disable-pip-version-check \
	  --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  $(GPU_WHEEL_PLATFORMS) -d .whl -r /dev/stdin
	@echo "$$(ls .whl/*.whl | wc -l) wheels, $$(du -sh .whl | cut -f1) in .whl/"
	@$(MAKE) -s gpu-command

gpu-command:
	@test -n "$$(ls .whl/*.whl 2>/dev/null)" || { echo "no wheels in .whl/: make gpu-wheels"; exit 1; }
	@git diff --quiet HEAD -- retorch bench tools || echo "WARNING: retorch/, bench/ or tools/ \
	  differ from HEAD: commit first, or the GPU results cannot be stored"
	@echo 'run(kind omitted, timeout_s=540, carry=[".whl"],'
	@echo '    command="BENCH_COMMIT=$(shell git rev-parse --short=10 HEAD) make gpu-report")'
	@echo 'then copy $$OUT/bench/results/gpu/*.json and $$OUT/bench/results/gpu/report/ into bench/results/gpu/'

ptx: $(STAMP)
	NUMBA_ENABLE_CUDASIM=0 $(PY) tools/check_ptx.py

test: setup chromium
	@start=$$(date +%s); \
	step() { local t0=$$(date +%s); echo; echo "==> $$1"; shift; "$$@"; echo "    ($$(( $$(date +%s) - t0 )) s)"; }; \
	step "lint"                         $(MAKE) -s lint; \
	step "jupytext pairs in sync"       $(MAKE) -s pairs; \
	step "labs/ equals generated"       $(MAKE) -s labs-check; \
	step "one source of truth"          $(MAKE) -s single-source; \
	step "PTX for sm_75, sm_80, sm_90"  $(MAKE) -s ptx; \
	step "unit and differential tests"  env HYPOTHESIS_DERANDOMIZE=1 $(MAKE) -s unit; \
	step "nbval (notebooks, solutions)" $(MAKE) -s nbval; \
	step "nbval, generic CPU, 1 thread" $(MAKE) -s nbval-portable; \
	step "notebooks from a wheel (Colab)" $(MAKE) -s check-wheel-all; \
	step "lab stubs fail their checks"  $(MAKE) -s lab-stubs; \
	step "lab checks catch wrong answers" $(MAKE) -s wrong-answers; \
	step "book build"                   $(MAKE) -s book; \
	step "book in a browser"            $(MAKE) -s html-check; \
	echo; echo "make test: all passed in $$(( $$(date +%s) - start )) s"

# ---------------------------------------------------------------- regenerate
execute: setup
	$(PY) tools/execute.py $(NOTEBOOKS) $(SOLUTIONS)
	$(MAKE) -s labs

bench: setup
	$(PY) tools/bench.py
	$(PY) tools/execute.py $$(grep -lE "plot_bench|bench_summary|load_bench" $(NOTEBOOKS) /dev/null)

clean:
	rm -rf _build .pytest_cache .hypothesis
	find . -name __pycache__ -not -path "./.venv/*" -prune -exec rm -rf {} +
