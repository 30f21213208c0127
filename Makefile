# Targets match what CI runs: .ci/run runs `make test`, then `make test-race`.
.PHONY: test test-race test-short bench bench-quick bench-micro lint quickstart soak screenshots

# The Docker targets (internal/redistest/dockertarget) are a module of their
# own, so that testcontainers-go stays out of what importers download; they
# skip when no Docker engine answers.
DOCKER_MODULE = internal/redistest/dockertarget

# The OpenTelemetry example is a module of its own too (the SDK and the
# Prometheus exporter stay out of the library's module graph).
OTEL_EXAMPLE = examples/otel

# The dashboard's browser tests (headless Chromium through chromedp) are a
# module of their own too, so chromedp stays out of the library's graph.
BROWSER_MODULE = internal/inspect/browsertest

# Tests run through gotestsum (pinned; installed into .bin on first use):
# a line per package, and at the end a summary of what failed — each
# failing test with its output, build errors, panics, races, a binary that
# timed out with the test it was running — then a DONE line. With
# TESTJSON_DIR set (.ci/run sets it), each run also writes its events
# there as go test -json, for the CI's closing summary.
GOTESTSUM_VERSION = v1.13.0
GOTESTSUM_BIN = $(CURDIR)/.bin/gotestsum-$(GOTESTSUM_VERSION)
GOTEST = $(GOTESTSUM_BIN) --format pkgname --format-hide-empty-pkg --hide-summary=skipped \
	$(if $(TESTJSON_DIR),--jsonfile "$$(mktemp -p $(TESTJSON_DIR) $(GOTEST_JSON_PREFIX)XXXXXX --suffix=.json)") --

$(GOTESTSUM_BIN):
	mkdir -p $(CURDIR)/.bin
	GOBIN=$(CURDIR)/.bin/tmp go install gotest.tools/gotestsum@$(GOTESTSUM_VERSION)
	mv $(CURDIR)/.bin/tmp/gotestsum $@ && rmdir $(CURDIR)/.bin/tmp

test: $(GOTESTSUM_BIN)
	$(GOTEST) ./... -count=1 -timeout 20m
	cd bench && $(GOTEST) . -count=1 -timeout 10m
	cd $(DOCKER_MODULE) && $(GOTEST) ./... -count=1 -timeout 20m
	cd $(OTEL_EXAMPLE) && $(GOTEST) ./... -count=1 -timeout 10m
	cd $(BROWSER_MODULE) && $(GOTEST) ./... -count=1 -timeout 10m

test-short:
	go test ./... -short -count=1

test-race: $(GOTESTSUM_BIN)
	$(GOTEST) ./... -race -count=1 -timeout 30m
	cd $(DOCKER_MODULE) && $(GOTEST) ./... -race -count=1 -timeout 30m

# Side-by-side benchmarks (a2redis, raw Redis Streams, asynq); refreshes docs/benchmarks.md.
bench:
	cd bench && go run ./cmd/a2bench --doc ../docs/benchmarks.md

bench-quick:
	cd bench && go run ./cmd/a2bench --quick

# In-package Go benchmarks with same-run baselines.
bench-micro:
	go test ./redisstore -run '^$$' -bench . -benchtime 2s -count 3

lint:
	test -z "$$(gofmt -l .)"
	go vet ./...
	cd bench && go vet ./...
	cd $(DOCKER_MODULE) && go vet ./...
	cd $(OTEL_EXAMPLE) && go vet ./...
	cd $(BROWSER_MODULE) && go vet ./...

# Regenerates docs/dashboard-overview.png and docs/dashboard-session.png:
# fills a demo prefix on a spawned redis-server, serves the dashboard and
# photographs it in headless Chromium.
screenshots:
	cd $(BROWSER_MODULE) && A2REDIS_SCREENSHOTS=$(CURDIR)/docs go test . -run TestScreenshots -count=1 -v

quickstart:
	go run ./examples/quickstart

# The randomized differential test against the reference model, for SOAK
# (default 10m): make soak SOAK=1h.
SOAK ?= 10m
soak:
	go test ./conformance -run TestDifferential -count=1 -v -timeout 0 -soak=$(SOAK)
