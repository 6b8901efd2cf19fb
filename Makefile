# make run   start the webhook locally on the shipped policies (fresh dev certificates)
# make test  install everything, compile the decision core and run the whole test suite
# make e2e   build (or reuse) etcd + kube-apiserver + kube-controller-manager from Go modules and
#            run the end-to-end suite against them on loopback (e2e/; Go >= 1.26 and kubectl needed)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Core tests run a second time on the interpreted source (what RDMA_WEBHOOK_PURE_PYTHON=1 installs).
PURE_TESTS := tests/test_decision.py tests/test_patch.py tests/test_k8s.py tests/test_nccl.py \
              tests/test_review.py tests/test_properties.py tests/test_workloads.py tests/test_build.py \
              tests/test_commands.py tests/test_fabrics.py

.PHONY: run test test-pure e2e compile bench clean

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
$(VENV)/.compiled: $(VENV)/.installed setup.py $(wildcard webhook/*.py)
	$(BIN)/python setup.py --quiet build_ext --inplace
	touch webhook/*.so *__mypyc.*.so  # setuptools skips relinking when mypyc's C is unchanged: the build is current
	touch $@

compile: $(VENV)/.compiled

run: $(VENV)/.compiled
	PATH="$(CURDIR)/$(BIN):$$PATH" ./scripts/run-local.sh

test: $(VENV)/.compiled
	RDMA_WEBHOOK_EXPECT=compiled $(BIN)/pytest
	$(MAKE) --no-print-directory test-pure

test-pure: $(VENV)/.installed
	rm -rf build/pure && mkdir -p build/pure && cp -r webhook build/pure/ && rm -f build/pure/webhook/*.so
	PYTHONPATH=build/pure RDMA_WEBHOOK_EXPECT=pure $(BIN)/pytest -q -p no:cacheprovider $(PURE_TESTS)

e2e: $(VENV)/.compiled
	E2E_PYTHON=$(BIN)/python ./e2e/run.sh

bench: $(VENV)/.compiled
	$(EDITABLE) '.[test,bench]'
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) certs .pytest_cache *.egg-info build *.so webhook/*.so
