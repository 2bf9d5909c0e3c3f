# The README's commands. Each target bootstraps a local virtual environment from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# constraints.txt pins the exact versions CI tested; pyproject.toml keeps the allowed ranges.
CONSTRAINTS := constraints.txt

.PHONY: demo test test-learning test-deployment test-heavy mutation bench notebooks docs lock clean cli-flags

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e ".[test,ray,flower]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/fedjax-rl demo --out runs/demo

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=15 \
		-m "not heavy and not deployment and not learning" tests

# The learning tests: each trains an algorithm for minutes (8 tests, about 8 minutes of two cores), and
# asserts the return it reaches over 4 vmapped seeds. CI runs them beside `make test`. Run them under
# XLA_FLAGS=--xla_cpu_max_isa=AVX2 as well before committing a change to an algorithm or environment.
test-learning: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=10 -rP -m learning tests

# Tests of real processes, all on 127.0.0.1: a Flower federation (a SuperLink and SuperNodes, `flwr run`),
# Flower's simulation engine, jax.distributed hosts, `reproduce --jobs` and `--executor ray` workers, a pip
# install. Ray listens on every interface, so its tests run it in a network of loopback alone
# (tests/loopback.py). Each process imports JAX and compiles its own programs, minutes in all, so they run
# beside `make test` in CI.
test-deployment: $(STAMP)
	$(BIN)/python -m pytest --durations=10 -m deployment tests

# Checks too long for CI (e.g. the MJX line-search cap against the uncapped solver over many states).
test-heavy: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m heavy tests

# Mutation testing of the core (tests/mutation/campaign.py; results in tests/mutation/). Not run by CI:
# one worker, about two hours on a free 2-core CPU. Property tests draw more examples here.
mutation: $(STAMP)
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e ".[test,mutation]"
	HYPOTHESIS_PROFILE=mutation $(BIN)/python tests/mutation/campaign.py run

bench: $(STAMP)
	$(BIN)/python -m benchmarks.throughput.tabular
	$(BIN)/python -m benchmarks.envs.lunarlander_env
	$(BIN)/python -m benchmarks.throughput.lunarlander_dqn
	@echo "benchmarks.throughput.dqn_throughput needs the SB3 reference env: see benchmarks/README.md"

# The command line's flag table (help, defaults, choices) from the settings declarations; run it after
# changing a setting, an algorithm or an environment (tests/test_cli.py says when it is out of date).
cli-flags: $(STAMP)
	$(BIN)/python -c "from fedjax_rl.cli import flag_table; print('wrote', flag_table.write_flag_table())"

# The documentation site (docs/): the guide's Markdown pages, the API reference generated from the
# docstrings (docs/api/, regenerated from scratch so that a removed module leaves no page behind), and
# the committed notebooks, rendered without running them. Warnings are errors, as in CI.
# Open docs/_build/html/index.html.
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	rm -rf docs/api
	$(BIN)/sphinx-build -W --keep-going -b html docs docs/_build/html

notebooks: $(STAMP)
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e ".[notebooks]"
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace notebooks/*.ipynb

# Refresh constraints.txt: resolve the newest versions pyproject.toml allows in a scratch venv.
# Then run `make test` and `make test-learning` (also under XLA_FLAGS=--xla_cpu_max_isa=AVX2) before committing.
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet --upgrade pip
	.venv-lock/bin/python -m pip install --quiet -e ".[test,docs,ray,flower]"
	{ sed -n '1,2p' $(CONSTRAINTS); .venv-lock/bin/python -m pip freeze --all --exclude-editable | grep -v '^fedjax\|^pip=='; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS) && rm -rf .venv-lock

clean:
	rm -rf $(VENV) runs docs/_build docs/api
