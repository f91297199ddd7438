# ragbot developer commands: `make setup` once, then `make test` or `make run`. `make help` lists them.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# uv from PATH, else the copy `make setup` installs with pip. Its cache stays in ~/.cache/uv (outside
# the clone), so CI keeps torch and friends between runs.
UV := $(shell command -v uv 2>/dev/null || echo python3 -m uv)
COMPOSE ?= docker compose
REDIS_PORT ?= 6390
ES_PORT ?= 9250
MW_PORT ?= 8480
MW_ADMIN_USER ?= Admin
MW_ADMIN_PASSWORD ?= ragbot-test-admin-password
MW_BOT_APP ?= ragbot
MW_BOT_PASSWORD ?= ragbottestbotpassword0123456789ab
PYTEST_ARGS ?= --durations=25
LINT_PATHS ?= shared services tests bench $(wildcard scripts/*.py)
# Redis, Elasticsearch, MediaWiki and the test tools without Docker (shared/ragbot/dev/services).
SERVICES := $(UV) run python -m ragbot.dev.services
export REDIS_PORT ES_PORT MW_PORT MW_ADMIN_USER MW_ADMIN_PASSWORD MW_BOT_APP MW_BOT_PASSWORD

.PHONY: help setup deps run run-wiki test test-compose test-unit lint format openapi bench up up-cluster down services-up services-down \
	services-status clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

setup: ## install uv if missing, then the whole workspace into .venv from uv.lock
	@command -v uv >/dev/null 2>&1 || python3 -m uv --version >/dev/null 2>&1 \
		|| python3 -m pip install --quiet uv \
		|| python3 -m pip install --quiet --user --break-system-packages uv
	@if [ -f uv.lock ]; then $(UV) sync --frozen; else $(UV) sync; fi

deps: ## install Redis, curl, unzip, a JDK, promtool, chromium and chromedriver when missing (apt-get as root, else a message)
	@$(SERVICES) deps

run: setup ## start Redis and the four services locally, index the sample pages, print the URLs
	$(UV) run python scripts/run.py

run-wiki: setup ## as run, but the pages come from a local MediaWiki (sample pages imported), indexed by polling it
	$(UV) run python scripts/run.py --mediawiki --mediawiki-port $(MW_PORT)

test: setup deps ## start real Redis + Elasticsearch + MediaWiki, run every test, stop what was started
	@export RAGBOT_SERVICES_OWNER="make-test-$$$$" RAGBOT_SERVICES="redis es mediawiki"; \
	trap '$(SERVICES) down' EXIT; \
	$(SERVICES) up; \
	RAGBOT_TEST_REDIS_URL="redis://127.0.0.1:$(REDIS_PORT)/0" RAGBOT_TEST_ES_URL="http://127.0.0.1:$(ES_PORT)" \
	RAGBOT_TEST_MEDIAWIKI_URL="http://127.0.0.1:$(MW_PORT)" \
	RAGBOT_TEST_MEDIAWIKI_USER="$(MW_ADMIN_USER)" RAGBOT_TEST_MEDIAWIKI_PASSWORD="$(MW_ADMIN_PASSWORD)" \
	RAGBOT_TEST_MEDIAWIKI_BOT_USER="$(MW_ADMIN_USER)@$(MW_BOT_APP)" RAGBOT_TEST_MEDIAWIKI_BOT_PASSWORD="$(MW_BOT_PASSWORD)" \
	RAGBOT_TEST_MEDIAWIKI_CONFIG="$$($(SERVICES) mw-config)" \
		$(UV) run pytest $(PYTEST_ARGS)

test-compose: setup ## boot compose.yaml in Docker (local images, host network), smoke-test it, remove what it built
	$(UV) run python scripts/compose_stack.py all

test-unit: setup ## the fast tests: no services needed
	$(UV) run pytest tests/unit $(PYTEST_ARGS)

lint: ## ruff check, ruff format --check, mypy --strict, the import layers (import-linter)
	$(UV) run ruff check
	$(UV) run ruff format --check
	$(UV) run mypy --strict $(LINT_PATHS)
	$(UV) run lint-imports --no-cache

format: ## apply ruff's fixes and formatting
	$(UV) run ruff check --fix
	$(UV) run ruff format

openapi: ## write the three services' OpenAPI documents to docs/openapi/ (tests/unit/test_openapi.py checks them)
	$(UV) run python scripts/openapi.py

bench: setup deps ## run every benchmark with real Redis + Elasticsearch + MediaWiki; figures in bench/results/*.json
	@export RAGBOT_SERVICES_OWNER="make-bench-$$$$" RAGBOT_SERVICES="redis es mediawiki"; \
	trap '$(SERVICES) down' EXIT; \
	$(SERVICES) up; \
	RAGBOT_TEST_REDIS_URL="redis://127.0.0.1:$(REDIS_PORT)/0" RAGBOT_TEST_ES_URL="http://127.0.0.1:$(ES_PORT)" \
	RAGBOT_TEST_MEDIAWIKI_URL="http://127.0.0.1:$(MW_PORT)" \
	RAGBOT_TEST_MEDIAWIKI_USER="$(MW_ADMIN_USER)" RAGBOT_TEST_MEDIAWIKI_PASSWORD="$(MW_ADMIN_PASSWORD)" \
		$(UV) run python -m bench.run $(BENCH_ARGS)

up: ## the production stack with Docker (set secrets in .env first; COMPOSE_PROFILES=gpu,ollama for more)
	$(COMPOSE) up -d --build --wait

up-cluster: ## the production stack with a three-node Elasticsearch and two workers (deploy/compose/cluster.env)
	$(COMPOSE) --env-file .env --env-file deploy/compose/cluster.env up -d --build --wait

down: ## stop the Docker stack (volumes are kept)
	$(COMPOSE) down

services-up: ## start Redis and Elasticsearch without Docker (ragbot.dev.services)
	@$(SERVICES) up

services-down: ## stop what services-up started
	@$(SERVICES) down

services-status: ## what answers on the Redis and Elasticsearch ports
	@$(SERVICES) status

clean: ## remove caches and build outputs (keeps .venv, var/ data and downloaded services)
	rm -rf .mypy_cache .ruff_cache .pytest_cache build dist shared/dist test-artifacts
	find . -path ./.venv -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
