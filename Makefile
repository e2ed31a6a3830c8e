# mpistage: `make demo` runs the main job, `make test` the whole suite.
# Both do every set-up step themselves (see `setup`), so a fresh Debian 12
# machine needs nothing else.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.mpistage-setup
NP      ?= 4
# Open MPI refuses root and more ranks than cores unless told.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export OMPI_MCA_rmaps_base_oversubscribe := 1
MPIRUN  := mpirun -n $(NP) --oversubscribe
SERIAL_TIMEOUT ?= 1800
MPI_TIMEOUT    ?= 1800

APT_PACKAGES := openmpi-bin libopenmpi-dev libhdf5-openmpi-dev python3-h5py-mpi \
                python3-mpi4py python3-venv slurm-wlm munge fuse3 procps chromium chromium-driver \
                python3-simgrid libsimgrid-dev

.PHONY: help setup system demo demo-ff-nf test test-serial test-mpi lint lint-check bench clean-demo bench-pfs \
        serial-venv serial-venv-maybe docs test-fast warm-kernels

help:
	@echo "make demo   - set up (if needed) and run the main job"
	@echo "make demo-ff-nf - the demo with NF seeded by FF-HEDM's grains (raw FF and NF frames)"
	@echo "make test   - set up (if needed) and run the whole test suite (docs build included)"
	@echo "make test-fast - unit tests and the quick end-to-end ones (~1.5 min): the edit-run loop"
	@echo "make docs   - the user guide and API reference (Sphinx, HTML in docs/_build/html)"
	@echo "make setup  - only the set-up (apt packages, .venv, editable install)"
	@echo "make lint   - ruff + mypy"
	@echo "make bench  - the benchmarks (bench/results/); make bench-pfs - over a simulated PFS"

setup: system $(STAMP)

# apt packages, installed only when one is missing (fast when done).
system:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing apt packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

# The venv must see Debian's parallel h5py and mpi4py, so it is made from
# Debian's interpreter with --system-site-packages (not the pyenv python3).
$(STAMP): setup.cfg pyproject.toml constraints.txt tools/debian_h5py.py
	@test -x $(PY) || /usr/bin/python3 -m venv --system-site-packages $(VENV)
	@# pip must see Debian's MPI h5py as `h5py`, or anything declaring h5py (hdf5plugin,
	@# stempy, LiberTEM) pulls PyPI's serial build, which shadows it (tools/debian_h5py.py)
	$(PY) tools/debian_h5py.py $(VENV)/h5py-constraint.txt
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -c $(VENV)/h5py-constraint.txt \
	  -e '.[kernels,plot,parsl,hedm,stream,stream-fast,view,view-test,em,libertem,livepeers,test,bench,docs]'
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -c $(VENV)/h5py-constraint.txt \
	  hdf5plugin fabio
	@H5PY_ALWAYS_USE_MPI=1 $(PY) -c "import h5py, mpi4py, numba, numpy; \
	  assert numpy.__version__ == '1.24.2', 'numpy ' + numpy.__version__; \
	  assert h5py.get_config().mpi, 'not the parallel h5py (a PyPI h5py shadows Debian\'s?): ' + h5py.__file__; \
	  import libertem, stempy"
	@touch $(STAMP)

# A cluster user's install (docs/guide/staging.md, "Real detector files"): a plain venv from the pyenv
# python3 (no Debian packages), the project + PyPI's serial h5py + mpi4py + hdf5plugin,
# and whatever NumPy and numba pip picks today (NumPy 2: no constraints.txt here).
# tests/e2e/test_stager_h5_serial.py runs the h5 staging tests in it, tests/e2e/test_serial_venv.py
# the staging, workflow and kernel tests (both skip, saying why, when it could not be
# built). Cached: rebuilt only when setup.cfg changes (~1 min).
SERIAL_VENV ?= .venv-serial
SERIAL_PY   ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.1[1-3]*/bin/python3 \
                 /root/.pyenv/versions/3.1[1-3]*/bin/python3))
SERIAL_STAMP := $(SERIAL_VENV)/.mpistage-serial

serial-venv: $(SERIAL_STAMP)

$(SERIAL_STAMP): setup.cfg pyproject.toml
	@test -n "$(SERIAL_PY)" || { echo "no pyenv python3 >= 3.11 found: set SERIAL_PY"; exit 1; }
	@test -x $(SERIAL_VENV)/bin/python || $(SERIAL_PY) -m venv $(SERIAL_VENV)
	$(SERIAL_VENV)/bin/python -m pip install -q --disable-pip-version-check -e '.[hdf5,filters,kernels]' \
	  pytest pytest-mpi pytest-timeout tifffile scipy
	@$(SERIAL_VENV)/bin/python -c "import h5py, numpy; assert not h5py.get_config().mpi, h5py.__file__; \
	  assert int(numpy.__version__.split('.')[0]) >= 2, 'numpy ' + numpy.__version__"
	@touch $@

# `make test` tries it; a failure only makes the serial-h5py test skip with the reason.
serial-venv-maybe:
	@$(MAKE) --no-print-directory serial-venv || echo "make serial-venv failed: tests/e2e/test_stager_h5_serial.py will skip"

demo: setup
	$(PY) -m hedm.demo --np $(NP) --out demo-out

demo-ff-nf: setup
	$(PY) -m hedm.demo --np $(NP) --out demo-out --seeds ff

# What the tests need made first runs side by side (one waits on the package index, the
# other keeps a core busy): the NumPy 2 venv and the kernels compiled into the tree's
# numba cache. Then the serial suite, the MPI suite, ruff + mypy and the docs build side
# by side: the suites spend much of their time waiting (on mpirun start-ups, on the
# other ranks), which ruff + mypy (16 s of CPU, mypy's cache cold) and the docs build
# (under 37 s) fill instead of running before them (2026-12-08); their lines interleave whole
# (--output-sync=line), each suite ends with its summary line, and make names the one
# that failed. `make test-serial test-mpi` runs the suites in turn.
test: setup
	$(MAKE) --no-print-directory -j2 --output-sync=target serial-venv-maybe warm-kernels
	$(MAKE) --no-print-directory -j4 --output-sync=line test-serial test-mpi lint-check docs

# Every numba kernel compiled once into the tree's own cache (the __pycache__ beside each
# kernel module), so that no test's mpirun ranks compile them, each rank side by side
# with the others: 62 s of CPU in a fresh clone, 1 s when warm (2026-12-07).
warm-kernels: setup
	env -u NUMBA_CACHE_DIR $(PY) -c "from kernels.numba_cache import exercise_kernels; exercise_kernels()"

# The serial suite in $(XDIST_N) pytest-xdist workers. Most of its time is spent waiting
# on mpirun subprocesses, so more workers than the 2 cores pays. tests/conftest.py
# schedules each file on one worker (module fixtures built once) and the files that
# must share one worker together (SHARED_WORKER: Slurm/FUSE/OS-node tests), in
# collection order (--no-loadscope-reorder: the long end-to-end files first). XDIST_N=0
# runs it in one process, as before.
# Measured 2026-11-25 (load 3-7 from other sessions): make test in a fresh clone 808 s,
# its serial suite 589 s (one process: 957 s); docs/contributing.md, "Running the tests".
XDIST_N ?= 4
XDIST   := -n $(XDIST_N) --no-loadscope-reorder
test-serial:
	timeout -k 30 $(SERIAL_TIMEOUT) $(PY) -m pytest -m "not mpi" -q --color=no $(XDIST)

# The edit-run loop: the unit tests and the end-to-end files that take seconds.
# Left to `make test`: the MPI suite, tests marked slow/slurm/fuse/osnodes, the other
# end-to-end files, and the NF/HEDM numerics below (numba fits and FF indexing: most of
# the unit tests' time; test_hedm_ffindex.py alone took 400+ s of the loop's 24 min wall
# at load 14-27 on 2026-12-08, one of its tests ending a worker at the 300 s timeout).
# Measured: tests/README.md.
FAST_E2E  := test_stager_plan_cli test_stager_stage_cli test_workflows_run
FAST_SKIP := test_kernels_nffit test_hedm_nffit test_kernels_microstructure test_kernels_nf_midas_golden \
             test_kernels_nfconfidence test_hedm_micmap test_hedm_nf_orientation test_hedm_nfhook \
             test_hedm_ffindex
# in 2 workers (the 2 cores; files whole, as in test-serial): its tests compute, they
# seldom wait. FAST_XDIST= runs it in one process.
FAST_XDIST ?= -n 2 --no-loadscope-reorder
FAST_ARGS := tests/unit $(foreach f,$(FAST_E2E),tests/e2e/$(f).py) \
             $(foreach f,$(FAST_SKIP),--ignore=tests/unit/$(f).py)
test-fast: setup warm-kernels
	timeout -k 30 600 $(PY) -m pytest -m "not mpi and not slow and not slurm and not fuse and not osnodes" \
	  -q --color=no -p no:cacheprovider $(FAST_XDIST) $(FAST_ARGS)

# The user guide and API reference; warnings are errors, so a broken reference fails
# `make test`. Needs no MPI (docs/conf.py mocks mpi4py).
DOCS_OUT ?= docs/_build/html
docs: setup
	$(PY) -m sphinx -W --keep-going -q -b html docs $(DOCS_OUT)

# pytest-mpi: every rank runs the same tests; tests/mpi_pytest.sh keeps rank 0's
# output on the terminal (its summary line is the last thing printed) and the
# other ranks' in .pytest-mpi/.
test-mpi:
	set -o pipefail; timeout -k 30 $(MPI_TIMEOUT) $(MPIRUN) bash tests/mpi_pytest.sh $(PY) -m mpi -q \
	  | tr -d '\000'  # pytest-mpi prints Open MPI's version string with its NUL byte

lint: setup lint-check

# ruff and mypy are pinned in setup.cfg, so a new release cannot fail CI by itself.
lint-check:
	$(PY) -m ruff check core stager analyses streams workflows kernels hooks hedm stem4d tests bench
	$(PY) -m mypy core stager analyses streams hooks workflows hedm stem4d

clean-demo:
	rm -rf demo-out

# Staging over a simulated shared PFS (bench/README.md): 2 GiB of 8 MiB frames (the issue's
# size) and 5,000 files of 4 KiB (scaled from 20,000: at 2 ms per serialised metadata op
# naive and cp at N = 8 alone would take ~25 min), N = 1, 2, 4, 8 emulated nodes, every
# method and N x cp -r; about 30 min. Removes its FUSE mounts even if interrupted.
PFS_BENCH_ARGS ?= --frames-bytes 2147483648 --small-files 5000
# Every benchmark but the simulated-PFS one, one after the other (they must not
# share the machine); each writes its figures to bench/results/.
bench: setup
	$(PY) bench/stage_bench.py
	$(PY) bench/tasks_bench.py
	$(PY) bench/dispatch_model.py
	$(PY) bench/kernels_bench.py
	$(PY) bench/h5_bench.py --out bench/results/h5
	$(PY) bench/sbcast_bench.py
	$(PY) bench/stream_bench.py
	$(PY) bench/stream_science_bench.py --picture docs/live-scan.png
	$(PY) bench/readers_bench.py
	$(PY) bench/nf_fit_bench.py
	$(PY) bench/nf_read_bench.py
	$(PY) bench/nf_projection.py

bench-pfs: setup
	$(PY) bench/pfs_stage.py $(PFS_BENCH_ARGS)
