# ember: `make test` and `make demo` install everything they need into .venv first.
PYTHON ?= python3.11
TORCH_SPEC ?= torch==2.13.0
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ember-setup

.PHONY: setup test demo clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) (Python >= 3.11)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

test: setup
	bash tools/run_tests.sh $(PY)

demo: setup
	$(PY) -m ember.demo
	$(PY) -m ember.bench --suite quick

clean:
	rm -rf $(VENV) build *.egg-info
