# The two commands of the README: `make reproduce` and `make test`.
# Both create .venv if it is missing and install the exact versions in constraints.txt.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
FULL ?=
BUDGET_MIN ?=
LIST ?=
PYTEST_ARGS ?=

.PHONY: install reproduce test test-fast gpu-check course lab clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev]' 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
	@# Headless Chromium for PNG figures and the browser test (best effort: skipped without root/apt).
	@bash scripts/install_chromium.sh || echo "chromium: not installed; PNG export and browser tests will be skipped"
	@# SimGrid's Python bindings for the simulated cluster (Debian's python3-simgrid; best effort like Chromium).
	@bash scripts/install_simgrid.sh $(BIN)/python || echo "simgrid: not installed; simulated figures will say so"
	@touch $(STAMP)

# FULL=1: the paper-scale run. The grid's configurations are simulated into benchmarks/results/sim
# (SimGrid, minutes), and its replayed ones measured into the committed store benchmarks/results/full first (BUDGET_MIN=60: for at most an hour, the notebooks once the grid
# is complete; LIST=1: list the grid and the time to fill it, measuring nothing; POINTS="*N=16*":
# only the configurations whose label matches, no notebooks). docs/benchmarks.md.
reproduce: install
	$(BIN)/python -m stanza_core.reproduce $(if $(FULL),--full,) $(if $(BUDGET_MIN),--budget-min $(BUDGET_MIN),) $(if $(LIST),--list,) $(if $(POINTS),--points "$(POINTS)",)

test: install
	$(BIN)/python -m pytest --durations=30 $(PYTEST_ARGS)

test-fast: install
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

# The GPU path end to end (NCCL, CUDA compute, calibration); about 8 minutes on a GPU machine.
# Without a CUDA GPU it says so in one line and exits non-zero. Output: gpu-check-out/summary.txt.
gpu-check: install
	$(BIN)/python scripts/gpu_check.py --out gpu-check-out

# The graded labs (nbgrader). Plain `make course`: a self-check in reproductions/out/course
# (reference solutions full marks, unmodified release zero); SUBMISSIONS=path grades
# <path>/<student>/<lab>/<lab>.ipynb once. A term keeps its folder and gradebook:
# COURSE_CMD=release|collect|autograde|feedback|export|bundle COURSE=dir [LABS=lab1,lab2]
# [SUBMISSIONS=inbox] [TO=students.zip]. docs/course.md.
course: install
	$(BIN)/python -m tutorials.course $(or $(COURSE_CMD),self-check) $(if $(COURSE),--course "$(COURSE)",) $(if $(LABS),--labs "$(LABS)",) $(if $(SUBMISSIONS),--submissions "$(SUBMISSIONS)",) $(if $(TO),--to "$(TO)",)

# JupyterLab on the notebooks (jupytext pairs each with its py:percent script); stop it with Ctrl-C.
lab: install
	$(BIN)/python -m jupyterlab notebooks

clean:
	rm -rf reproductions/out .pytest_cache
