# Every target builds the local virtual environment first, so each works on a fresh clone.
PY      := .venv/bin/python
STAMP   := .venv/.installed
XDIST   := --numprocesses auto --maxprocesses 4

.PHONY: demo test lint format docs bench clean

$(STAMP): requirements-dev.txt pyproject.toml
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	.venv/bin/minipaged tui

test: $(STAMP)
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	# pytest-xdist: one worker per core (at most 4); --dist loadfile keeps each test file in
	# one worker, so a module's fixtures (a built site, a browser, a model's run) are made once;
	# files go out in collection order, longest first (tests/conftest.py).
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(PY) -m pytest $(XDIST) --dist loadfile --no-loadscope-reorder
	# The CUDA kernels in Numba's simulator: a process of their own, since the simulator must be
	# chosen before numba is first imported. Its tests are independent: spread them one by one.
	NUMBA_ENABLE_CUDASIM=1 HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(PY) -m pytest $(XDIST) tests/test_cuda_kernels.py tests/test_peer_cuda_simulator.py

lint: $(STAMP)
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

format: $(STAMP)
	.venv/bin/ruff format .
	.venv/bin/ruff check --fix .

docs: $(STAMP)
	.venv/bin/mkdocs serve

bench: $(STAMP)
	.venv/bin/minipaged bench

clean:
	rm -rf .venv site .pytest_cache .hypothesis
