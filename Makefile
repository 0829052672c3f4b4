# gpuops.provision — every target sets up what it needs on a fresh Debian 12 machine and is safe to re-run.
#   make lab    the site playbook against the built-in simulated lab (the main job)
#   make test   every gate and test that CI runs (static checks, unit, stand-in, installed, integration)
#   make test-containers   the Molecule scenarios and the installed collection against the lab; make test-all: both
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ROOT        := $(abspath .)
PYTHON_BASE ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12.*/bin/python3.12) $(shell command -v python3.12))
VENV        := $(ROOT)/.venv
PY          := $(VENV)/bin/python
BIN         := $(VENV)/bin
COLL_ROOT   := $(ROOT)/build/collections
COLL_LINK   := $(COLL_ROOT)/ansible_collections/gpuops/provision
AWX_COLL    := $(COLL_ROOT)/ansible_collections/awx/awx/MANIFEST.json
SANITY_DIR  := $(ROOT)/build/sanity/ansible_collections/gpuops/provision
APT_PACKAGES := git rsync podman runc debootstrap ca-certificates chromium fonts-dejavu-core apt-utils dpkg-dev gnupg gcc libc6-dev prometheus
CORE_VERSION := $(shell $(PY) -c 'import ansible.release as r; print(".".join(r.__version__.split(".")[:2]))' 2>/dev/null)

export PATH := $(BIN):$(PATH)
export ANSIBLE_COLLECTIONS_PATH := $(COLL_ROOT):$(VENV)/lib/python3.12/site-packages
export ANSIBLE_CONFIG := $(ROOT)/ansible.cfg
export CONTAINERS_CONF := $(ROOT)/lab/images/containers.conf
export PYTHONUNBUFFERED := 1

.PHONY: help deps venv collection lab lab-up lab-sysfs lab-images lab-node-image lab-vcsim lab-nvml-wheel lab-libnvml lab-cuda-repo lab-rpm-repo lab-kube lab-kube-tools lab-mig-parted lab-device-plugin lab-down test test-containers test-all sanity typecheck units lab-tests integration installed installed-lab molecule lint build docs-check bench mutation clean

help:
	@echo "make lab        run playbooks/site.yml against the simulated lab (sets everything up)"
	@echo "make test       sanity, lint, build, docs, unit, stand-in, installed and integration tests (what CI runs)"
	@echo "make test-containers  the Molecule scenarios and installed-lab (podman containers; make test-all: both)"
	@echo "sub-targets:    deps venv collection test-all sanity typecheck units lab-tests integration installed installed-lab molecule lint build docs-check bench lab-down clean"
	@echo "make mutation   mutation score of the pure module_utils files (not in make test; MUTATION_FILES=_proxmox/property_strings.py narrows it)"

# --- set-up ---------------------------------------------------------------------------------------------------------
deps: build/.deps.stamp
build/.deps.stamp: Makefile
	@mkdir -p build
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo ">> apt-get install $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@touch $@

venv: $(VENV)/.stamp
$(VENV)/.stamp: requirements.txt requirements-dev.txt
	@test -n "$(PYTHON_BASE)" || { echo "Python 3.12 not found (set PYTHON_BASE=/path/to/python3.12)"; exit 1; }
	@test -x $(PY) || $(PYTHON_BASE) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt 2>&1 | grep -v '^WARNING: Location' || true
	@$(PY) -c 'import ansible, ansible_builder, pyVmomi, proxmoxer, pynvml, jmespath, kubernetes' # fail here if pip failed
	@touch $@

# ansible-test and `ansible` need the collection under ansible_collections/<namespace>/<name>.
collection: $(COLL_LINK) $(AWX_COLL)
$(COLL_LINK):
	@mkdir -p $(dir $@)
	@ln -sfn ../../../.. $@

# awx.awx, which playbooks/awx_setup.yml calls, from the pinned wheel of tools/awx-collection.txt (it says why).
$(AWX_COLL): tools/awx-collection.txt | venv
	@rm -rf build/wheels/awx && $(PY) -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
	  -r tools/awx-collection.txt -d build/wheels/awx
	@rm -rf $(COLL_ROOT)/ansible_collections/awx && mkdir -p $(COLL_ROOT)
	@cd $(COLL_ROOT) && $(PY) -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
	  z.extractall(members=[m for m in z.namelist() if m.startswith("ansible_collections/awx/awx/")])' $(ROOT)/build/wheels/awx/*.whl
	@test -s $@ && echo "awx.awx $$(grep -o '"version": "[^"]*"' $@ | head -1) in $(COLL_ROOT)"

# --- the main job ---------------------------------------------------------------------------------------------------
# Its slow first-run parts run side by side (issue 41 point 10): pip (network), the control plane's Go build (CPU),
# the node image (debootstrap: network and disk) and vcsim's Go build; then the stand-ins start and the playbook runs.
lab: deps
	@$(MAKE) --no-print-directory -j4 --output-sync=target venv lab-kube lab-node-image lab-vcsim
	@$(MAKE) --no-print-directory collection lab-sysfs lab-up
	ANSIBLE_SHOW_CUSTOM_STATS=1 $(BIN)/ansible-playbook -i inventories/lab playbooks/site.yml
	@echo "fleet report: build/lab/report/report.html (preflight reports in build/lab/preflight/); make lab-down stops the lab"

# Start the stand-ins and the GPU node containers (kept running between runs so a second `make lab` sees the first
# one's state); builds the node image (lab/images) when it is missing.
lab-up: deps venv lab-sysfs lab-kube
	lab/up.sh build/lab/run

# Fake /sys + /proc trees of the lab's hosts (the kernel's layout, from lab/sysfs/specs/*.json). Emptied, not removed:
# the GPU node containers bind-mount these directories.
lab-sysfs: venv
	@for spec in lab/sysfs/specs/*.json; do \
	  dst=build/lab/sysfs/$$(basename $$spec .json); mkdir -p $$dst; find $$dst -mindepth 1 -delete; \
	  $(PY) lab/sysfs/fake_tree.py $$spec $$dst; \
	done

# nvidia-ml-py for the managed hosts of Molecule and the lab (tools/nvml-wheel.txt says why), once per pin.
NVML_WHEEL := build/wheels/nvml/nvidia_ml_py-13.615.71-py3-none-any.whl
lab-nvml-wheel: $(NVML_WHEEL)
$(NVML_WHEEL): tools/nvml-wheel.txt | venv
	@mkdir -p $(dir $@)
	$(PY) -m pip download -q --disable-pip-version-check --no-deps --require-hashes -r tools/nvml-wheel.txt -d $(dir $@)
	@test -s $@

# Stand-in of NVIDIA's CUDA apt repository (lab/cuda-repo), rebuilt only when its definition changes.
lab-cuda-repo: deps venv
	$(PY) lab/cuda-repo/build.py build/lab/cuda-repo

# Stand-in of NVIDIA's CUDA RPM repositories and the EL distribution repositories (lab/rpm-repo), built inside a
# bookworm container; rebuilt only when its definition changes.
lab-rpm-repo: deps venv lab-images
	$(PY) lab/rpm-repo/build.py build/lab/rpm-repo

# The upstream Kubernetes control plane (kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kwok) built
# from the Go modules pinned in lab/kube/go.mod; once per pin, cached under build/kube/. `make lab` needs nothing else.
lab-kube: deps
	@test -n "$(PYTHON_BASE)" || { echo "Python 3.12 not found (set PYTHON_BASE=/path/to/python3.12)"; exit 1; }
	@# The interpreter the venv is made from: the build needs only the standard library, so it need not wait for pip.
	$(PYTHON_BASE) lab/kube/build.py

# The GPU node containers' image (lab/up.sh builds it too when missing) and vcsim, for `make lab` to build beside
# the control plane.
lab-node-image: deps
	@podman image exists localhost/debian-trixie:lab || lab/images/build.sh trixie

lab-vcsim: deps
	lab/vcsim/build.sh

# kubeadm, kubelet, kubectl and the fake CRI, which only some tests run (the same pin and caches; built on first use
# otherwise): built by the test targets that use them, beside the static checks in `make test`.
lab-kube-tools: deps venv
	$(PY) lab/kube/build.py tools

# gpusim's libnvidia-ml.so.1 (lab/gpusim/libnvml: gcc, and go for NVIDIA's nvml.h) with the exports of gpusim's default
# driver, cached under build/libnvml/ (build/libnvml/by-driver/<driver> for the containers that mount it); other
# drivers' builds are linked on first use.
lab-libnvml: deps venv
	$(PY) lab/gpusim/libnvml/build.py

# NVIDIA's nvidia-mig-parted (lab/mig-parted/go.mod), the oracle for mig-parted v1 documents; cached under build/mig-parted/.
lab-mig-parted: deps venv
	$(PY) lab/mig-parted/build.py

# NVIDIA's k8s-device-plugin (lab/device-plugin/go.mod), run on a real kubelet over gpusim's libnvidia-ml by
# tests/lab/test_device_plugin.py; cached under build/device-plugin/.
lab-device-plugin: deps venv
	$(PY) lab/device-plugin/build.py

lab-down:
	lab/down.sh build/lab/run

# --- tests ----------------------------------------------------------------------------------------------------------
# Phases and their wall time and CPU use in a table at the end (tools/test_phases.py): CI shows only the tail. A run
# cut off by CI's time limit (SIGTERM) prints the table so far, the running stage included.
# The stand-ins' builds (Go compiles) run beside the static checks, which leave a core idle most of the time
# (ansible-test sanity runs one test at a time); the stand-ins' own tests (lab-tests) and the installed tests run
# beside the unit tests, whose phase left a core idle too (74 % CPU). The integration tests run alone: each phase keeps
# both cores busy, and beside each other they took three times as long and timing tests failed (Molecule beside the
# integration tests on 2026-12-07: mig_reconfigure 2281 s instead of 695, two roll tests past their bounds).
# The tests that run roles in podman containers (Molecule, installed-lab) are their own target, test-containers: on
# CI's 2-core machines the whole set needs 6,000 to 8,000 s against CI's 5,400 s (CI's runs of 2026-12-07: the phases
# up to the integration tests 3,017 to 4,850 s, Molecule 1,900 to 2,700 s, installed-lab 500 to 900 s), so CI runs
# `make test`; run test-containers before a change to a role, a scenario, the lab's images or site.yml lands
# (docs/development.md, "Which tests run where"). `make test-all`: both, one after the other.
test: deps venv collection
	$(PY) tools/test_phases.py "sanity+lint typecheck+lab-kube lab-kube-tools lab-mig-parted lab-device-plugin" "build docs-check units+lab-tests installed" \
	  integration
	@echo "make test: all gates passed"

# Molecule's scenarios (roles on Debian and EL containers: apt, dnf, DKMS, the roll on three nodes) and the installed
# collection's AWX job templates against the simulated lab. Their inputs (the Debian images, the package repositories,
# the NVML wheel and library, the control plane) are built first, in their own phase.
test-containers: deps venv collection
	$(PY) tools/test_phases.py "lab-images lab-cuda-repo lab-rpm-repo lab-nvml-wheel lab-libnvml lab-kube" molecule installed-lab
	@echo "make test-containers: all passed"

test-all: test test-containers

# ansible-test insists on running from a real ansible_collections/<ns>/<name> directory (not through a symlink),
# so sanity runs on a copy of the tracked files; lab/ and bench/ are dev tools outside the shipped collection.
sanity: venv
	@rm -rf $(SANITY_DIR) && mkdir -p $(SANITY_DIR)
	@git ls-files -co --exclude-standard | grep -Ev '^(lab|bench)/' | rsync -a --files-from=- ./ $(SANITY_DIR)/
	@# ansible-test --venv downloads a pip bootstrap script from a host this lab cannot reach; serve it from tools/.
	@pipv=$$(grep -o "pip='[0-9.]*'" $(VENV)/lib/python3.12/site-packages/ansible_test/_internal/python_requirements.py | head -1 | tr -dc '0-9.'); \
	  mkdir -p $(HOME)/.ansible/test/cache && cp tools/ansible_test_get_pip.py $(HOME)/.ansible/test/cache/get_pip_$${pipv//./_}.py
	@# Its own git index, so ansible-test lists these files rather than this repo's (which ignores build/).
	@cd $(SANITY_DIR) && git init -q && git add -A
	cd $(SANITY_DIR) && $(BIN)/ansible-test sanity --venv --python 3.12 --color no

# mypy over plugins/module_utils and plugins/plugin_utils (tools/mypy.ini says which files are annotated in full).
typecheck: venv collection
	cd build/collections && $(BIN)/mypy --config-file $(ROOT)/tools/mypy.ini \
	  ansible_collections/gpuops/provision/plugins/module_utils ansible_collections/gpuops/provision/plugins/plugin_utils

# The tests that read simulated GPUs do so through the real nvidia-ml-py over gpusim's libnvidia-ml.so.1
# (tests/helpers/gpusim_nvml.py), built here first so the two workers do not wait on each other's build.
units: venv collection lab-libnvml
	$(PY) -m pytest tests/unit -q -n 2 --durations=10

# Mutation testing (mutmut) of the pure module_utils files against their own unit tests (tools/mutation.toml; how to
# read it: docs/development.md). Minutes per file, so not part of `make test`. MUTATION_CHILDREN=N runs N at once.
mutation: venv collection
	$(PY) tools/mutation.py --children $(or $(MUTATION_CHILDREN),1) $(MUTATION_FILES)

# The stand-ins checked against the APIs they copy, before anything relies on them.
lab-tests: venv collection deps lab-kube lab-kube-tools lab-mig-parted lab-device-plugin
	$(PY) -m pytest tests/lab -q -n 2 --durations=15

integration: venv collection deps lab-kube lab-kube-tools
	$(PY) -m pytest tests/integration -q -n 2 --durations=25

# The collection as users get it (tests/installed): the tarball installed into an empty collections path in an
# ansible-core-only virtualenv (build/installed/venv, kept between runs), and the AWX job templates run by ansible-runner.
installed: venv collection deps lab-kube
	$(PY) -m pytest tests/installed -q -n 2 --durations=10 -m "not lab"

# The site and driver pin job templates from the installed collection against the simulated lab, on a fresh lab
# (a lab left by `make lab` is taken down and its state removed first; it is down again afterwards).
installed-lab: venv collection deps lab-kube lab-images
	lab/down.sh build/lab/run && rm -rf build/lab/run
	$(MAKE) --no-print-directory lab-sysfs lab-up
	@# The lab goes down whether the tests pass or fail (the recipe shell runs with -e).
	$(PY) -m pytest tests/installed -q --durations=5 -m lab && rc=0 || rc=$$?; lab/down.sh build/lab/run; exit $$rc

# Debian base images for the containers (debootstrap + podman import; skipped when present).
lab-images: deps
	lab/images/build.sh bookworm trixie

# Two scenarios at a time (MOLECULE_JOBS), each one's log in build/molecule/<scenario>.log (tools/molecule_all.py).
molecule: venv collection deps lab-images lab-cuda-repo lab-rpm-repo lab-kube lab-nvml-wheel lab-libnvml
	$(PY) tools/molecule_all.py

lint: venv collection
	$(BIN)/ansible-lint --profile production --offline

build: venv
	@rm -rf build/dist && mkdir -p build/dist
	$(BIN)/ansible-galaxy collection build --force --output-path build/dist .
	@tar -tzf build/dist/gpuops-provision-*.tar.gz > build/dist/contents.txt
	@if grep -E '^((lab|bench|molecule|build|tests|\.venv|inventories/lab)/|pytest\.ini$$)' build/dist/contents.txt; then echo "tarball ships dev-only files"; exit 1; fi
	@# No simulator secret (lab/pvesim/fixtures/lab.json passwords and tokens) may ship in the tarball.
	@$(PY) tools/tarball_secrets.py build/dist/gpuops-provision-*.tar.gz lab/pvesim/fixtures/lab.json
	@echo "tarball: $$(ls build/dist/*.tar.gz) ($$(wc -l < build/dist/contents.txt) entries, no lab/ bench/ molecule/ tests/)"
	@# The execution environment's definition and its inputs (the tarball, requirements.txt, bindep.txt) must render
	@# into a build context; the image build itself (ansible-builder build) needs the base image's registry.
	@rm -rf build/ee && $(BIN)/ansible-builder create -f execution-environment.yml --context build/ee >/dev/null
	@test -s build/ee/Containerfile && ls build/ee/_build/collection/gpuops-provision-*.tar.gz >/dev/null
	@echo "execution environment: build context in build/ee ($$(grep -c . build/ee/Containerfile) Containerfile lines)"

docs-check: venv collection
	@for m in $$(ls plugins/modules/*.py | xargs -n1 basename | sed 's/\.py$$//'); do \
	  $(BIN)/ansible-doc -t module gpuops.provision.$$m > build/ansible-doc-$$m.txt 2>&1 || { cat build/ansible-doc-$$m.txt; echo "ansible-doc failed for $$m"; exit 1; }; \
	  grep -q 'EXAMPLES' build/ansible-doc-$$m.txt && grep -q 'RETURN VALUES' build/ansible-doc-$$m.txt || { echo "$$m: docs incomplete"; exit 1; }; \
	done
	@echo "ansible-doc renders $$(ls plugins/modules/*.py | wc -l) modules"
	@# Every plugin's and role entry point's docs, as Galaxy and docs sites render them (semantic markup, references).
	cd $(COLL_LINK) && $(BIN)/antsibull-docs lint-collection-docs --plugin-docs .
	@# Changelog fragments must parse (a ': ' inside a plain YAML scalar breaks the release changelog).
	$(BIN)/antsibull-changelog lint

# Every benchmark that runs here (bench/device/nvml_profiles.py needs a GPU machine); each prints its ratios.
BENCHES := bench/mig/run.py bench/mig_reconfigure/run.py bench/vsphere/bench_vsphere.py bench/proxmox/bench_vm_gpu.py bench/filter_preload/run.py
bench: venv collection deps lab-kube
	@for b in $(BENCHES); do echo ">> $$b"; $(PY) $$b; done

clean:
	rm -rf build tests/output
