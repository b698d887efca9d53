# LayerFS. `make help` lists the targets; CI runs `make test` through .ci/run.
GO ?= go
# sbin too: the loop file systems (quotas, the bench) run mkfs.ext4 and
# mkfs.xfs, which Debian installs there.
export PATH := /usr/local/go/bin:$(PATH):/usr/sbin:/sbin

.DEFAULT_GOAL := help
.PHONY: help build layerfs lint test test-lima cells demo bench-store bench-session bench-spawn

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build every command (./cmd/...) into bin/, static (the Docker supervisor runs inside containers)
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -o bin/ ./cmd/...

layerfs: ## build only bin/layerfs
	@mkdir -p bin
	$(GO) build -o bin/layerfs ./cmd/layerfs

lint: ## go vet, staticcheck (pinned; scripts/ensure-staticcheck installs it), gofmt -l and go mod tidy -diff; CI runs it before the tests
	$(GO) vet ./...
	$$(scripts/ensure-staticcheck) ./...
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); if [ -n "$$out" ]; then echo "gofmt -l: not formatted:"; echo "$$out"; exit 1; fi
	$(GO) mod tidy -diff

test: ## the whole test suite: scripts/test-setup, then go test ./...
	scripts/test-setup
	$(GO) test -count=1 -timeout 60m ./...

test-lima: ## only the lima platform's conformance suite (also in `make test`): scripts/ensure-lima (QEMU, limactl from source, the guest image), then one VM under software emulation
	scripts/ensure-lima
	$(GO) test -count=1 -timeout 60m -run TestConformance -v ./internal/platforms/lima/

cells: build ## the main job: the twelve cells on the local platform, LayerFS vs native, 5 samples; prints the table
	bin/layerfs cells run --out $(or $(OUT),results/cells-$(shell date +%Y%m%d-%H%M%S)) $(ARGS)

demo: build ## import a directory, make history, diff and check out (scripts/demo)
	scripts/demo

bench-store: layerfs ## dedup growth, capture throughput and fork time against the issue-2 targets
	bin/layerfs bench store

bench-session: build ## workspace open/close, exec latency and overhead, commit, fork, throughput, idle memory
	bin/layerfs bench session $(ARGS)

bench-spawn: build ## an exec against a process: CPU per exec, latency, throughput, a spawn of 100 workspaces, memory
	bin/layerfs bench spawn $(ARGS)
