# Two commands on a fresh machine: `make demo` and `make test`. Each creates the local virtualenv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.pyro_bnn-installed
FMNIST_DIR := /usr/share/datasets/fashion-mnist
DEMO_OUT ?= results/demo

.PHONY: install fmnist test test-all demo lint bench docs clean device-pack

install: $(STAMP)

# torch/torchvision are installed first at the versions that lie on this machine's disk (a CUDA build that also runs
# on the CPU); setup.cfg itself only states lower bounds. The extras: dev (tests, ruff, ...), ray (the Ray executor,
# tested) and docs (make docs; tests/test_docs.py builds the site in strict mode). A change to setup.cfg or to the
# extras named here reinstalls.
$(STAMP): setup.cfg pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install --quiet -e '.[dev,ray,docs,laplace]'
	touch $(STAMP)

# Fashion-MNIST comes from Debian's dataset-fashion-mnist package. Installed when missing and we are root;
# otherwise the data loader's own error explains the options.
fmnist:
	@if [ -d $(FMNIST_DIR) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 || \
		{ apt-get update -q >/dev/null && apt-get install -y -q dataset-fashion-mnist >/dev/null; }; \
	else \
		echo "note: $(FMNIST_DIR) is missing and we are not root; run 'sudo apt-get install dataset-fashion-mnist' or pass --data-dir"; \
	fi

# The suite on two pytest-xdist workers (the dev extra), one per core of the project's machines; every test keeps
# one torch thread (tests/conftest.py). Its temporary folders (tmp_path) go to the tmpfs /dev/shm where there is
# one: the runs write every file atomically, with an fsync each (about 3 ms on the machine's disk, none on a tmpfs);
# pytest's own numbered folders under TMPDIR, so two suites at once do not meet.
TEST_TMPDIR := $(shell test -d /dev/shm -a -w /dev/shm && echo /dev/shm)
test: $(STAMP) fmnist
	$(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR) )$(PY) -m pytest -q -n 2

# Slow convergence and experiment smoke runs, excluded from `make test`.
test-all: $(STAMP) fmnist
	$(PY) -m pytest -q -m "slow or not slow"

demo: $(STAMP) fmnist
	$(VENV)/bin/pyro-bnn demo --out $(DEMO_OUT)

# The documentation site (docs/, mkdocs.yml): the API reference from the docstrings, the README's long sections,
# the notebooks (not executed) and the CLI's help; strict, so a warning or a broken cross-reference fails.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

lint: $(STAMP)
	$(VENV)/bin/ruff check pyro_bnn tests bench

# Training-step and predictive benchmark against a deterministic step and the competitors, in one process; writes
# bench/RESULTS.md and bench/results-cpu.json; then the node-noise LeNet step (bench/NODE_NOISE.md). The competitors
# install here only, pinned to the project's torch.
bench: $(STAMP)
	$(PY) -m pip install --quiet -r bench/requirements.txt -c bench/constraints.txt
	$(PY) bench/run.py
	$(PY) bench/node_noise.py

# What a GPU slot needs beside the tree (bench/device_grid.sh): Pyro's wheels (the machine has PyTorch only), the
# MNIST and Fashion-MNIST IDX files, and the commit the tree is at (the machine's copy has no git folder), which
# must hold every change to pyro_bnn/. Carry .whl, .devdata and .devcommit with the tree.
MNIST_DIR ?= ../shared/datasets/mnist
device-pack: $(STAMP)
	@test -z "$$(git status --porcelain -- pyro_bnn)" || { echo "commit pyro_bnn/ first: a GPU run names its commit"; exit 1; }
	$(PY) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux2014_x86_64 -d .whl pyro-ppl==$$($(PY) -c 'import pyro; print(pyro.__version__)') pyro-api
	mkdir -p .devdata/mnist .devdata/fashion-mnist
	cp $(MNIST_DIR)/*-ubyte.gz .devdata/mnist/
	cp $(FMNIST_DIR)/*-ubyte.gz .devdata/fashion-mnist/
	git rev-parse HEAD > .devcommit

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
