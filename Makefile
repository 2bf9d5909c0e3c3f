# The README's commands. Each target bootstraps a local virtual environment from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench notebooks clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/fedjax-rl demo --out runs/demo

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile --durations=15 tests

bench: $(STAMP)
	$(BIN)/python benchmarks/tabular.py
	$(BIN)/python benchmarks/lunarlander_env.py
	$(BIN)/python benchmarks/lunarlander_dqn.py
	@echo "dqn_throughput.py needs the SB3 reference env: see benchmarks/README.md"

notebooks: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[notebooks]"
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace notebooks/*.ipynb

clean:
	rm -rf $(VENV) runs
