# Targets match what CI runs: .ci/run runs `make lint`, `make test`, `make
# test-valkey`, then `make test-race`; `make chaos` and `make scale` are gated.
.PHONY: test test-race test-short test-valkey chaos chaos-valkey scale bench bench-quick bench-micro lint quickstart soak screenshots

# The Docker targets (internal/redistest/dockertarget) are a module of their
# own, so that testcontainers-go stays out of what importers download; they
# skip when no Docker engine answers.
DOCKER_MODULE = internal/redistest/dockertarget

# The OpenTelemetry example is a module of its own too (the SDK and the
# Prometheus exporter stay out of the library's module graph).
OTEL_EXAMPLE = examples/otel

# The dashboard's browser tests (headless Chromium through chromedp) are a
# module of their own too, so chromedp stays out of the library's graph.
BROWSER_MODULE = cmd/a2redis-inspect/inspect/browsertest

# Tests run through gotestsum (pinned; installed into .bin on first use):
# go test's own output (a line per package), and at the end a summary of what failed — each
# failing test with its output, build errors, panics, races, a binary that
# timed out with the test it was running — then a DONE line. With
# TESTJSON_DIR set (.ci/run sets it), each run also writes its events
# there as go test -json, for the CI's closing summary.
GOTESTSUM_VERSION = v1.13.0
GOTESTSUM_BIN = $(CURDIR)/.bin/gotestsum-$(GOTESTSUM_VERSION)
GOTEST = $(GOTESTSUM_BIN) --format standard-quiet --hide-summary=skipped \
	$(if $(TESTJSON_DIR),--jsonfile "$$(mktemp -p $(TESTJSON_DIR) $(GOTEST_JSON_PREFIX)XXXXXX --suffix=.json)") --

$(GOTESTSUM_BIN):
	mkdir -p $(CURDIR)/.bin
	GOBIN=$(CURDIR)/.bin/tmp go install gotest.tools/gotestsum@$(GOTESTSUM_VERSION)
	mv $(CURDIR)/.bin/tmp/gotestsum $@ && rmdir $(CURDIR)/.bin/tmp

test: $(GOTESTSUM_BIN)
	$(GOTEST) ./... -count=1 -timeout 20m
	# The differential test again, every seed through the general scripts
	# only (the store tries the flat fast paths first by default).
	$(GOTEST) ./conformance -run TestDifferential -count=1 -timeout 20m -args -scripts=general
	cd bench && $(GOTEST) . -count=1 -timeout 10m
	cd $(DOCKER_MODULE) && $(GOTEST) ./... -count=1 -timeout 20m
	cd $(OTEL_EXAMPLE) && $(GOTEST) ./... -count=1 -timeout 10m
	cd $(BROWSER_MODULE) && $(GOTEST) ./... -count=1 -timeout 10m

# The server-sensitive packages again with Valkey as every spawned server:
# the contract on every target, the scripts and the differential test, the
# store, the worker runtime, pub/sub, presence and the cluster harness (the
# CLI and the examples reach the server only through the store).
# VALKEY_BIN is the directory of a Valkey build (valkey-server,
# valkey-cli); CI has it beside the clone. .ci/with-valkey names them
# redis-server and redis-cli first on PATH, so every test that spawns a
# server or a cluster spawns Valkey, and fails unless redis-server
# --version then says Valkey. Without the build it is skipped — with
# CI=true, a failure.
VALKEY_BIN ?= ../shared/servers/valkey-8.0.1/bin
VALKEY_PACKAGES = . ./conformance ./redisstore ./worker ./notify ./presence ./internal/redistest ./internal/keylockproxy ./internal/faultproxy

test-valkey: $(GOTESTSUM_BIN)
	.ci/with-valkey $(VALKEY_BIN) $(GOTEST) $(VALKEY_PACKAGES) -count=1 -timeout 20m

test-short:
	go test ./... -short -count=1

# The race detector over every package of the library's module (the
# Docker targets' module skips without a Docker engine: not built here).
test-race: $(GOTESTSUM_BIN)
	$(GOTEST) ./... -race -count=1 -timeout 30m

# The tests CI leaves out because their outcome depends on timing, not only
# on the code (docs/testing.md lists them and their last results): slot
# migrations and reshards under load, failovers on node timeouts, killed and
# stopped worker processes, the multi-process chaos test, AOF fsync waits.
# The packages run whole with A2REDIS_CHAOS=1 (about 5 minutes here).
CHAOS_PACKAGES = ./redisstore ./worker ./internal/redistest
GOTEST_VERBOSE = $(GOTESTSUM_BIN) --format standard-verbose --hide-summary=skipped --
chaos: $(GOTESTSUM_BIN)
	A2REDIS_CHAOS=1 $(GOTEST_VERBOSE) $(CHAOS_PACKAGES) -count=1 -timeout 60m

# The same on Valkey (the migrations, reshards and failovers included).
chaos-valkey: $(GOTESTSUM_BIN)
	A2REDIS_CHAOS=1 .ci/with-valkey $(VALKEY_BIN) $(GOTEST_VERBOSE) $(CHAOS_PACKAGES) -count=1 -timeout 60m

# Scripts and the ready index at scale (1M heads, 100,000 sessions):
# SLOWLOG bounds per call, memory per session (minutes; A2REDIS_SCALE=1).
scale: $(GOTESTSUM_BIN)
	A2REDIS_SCALE=1 $(GOTEST_VERBOSE) ./redisstore -run 'Scale|AtScale|TestMemoryFollowsLiveSessions|TestCompactionCost' -count=1 -timeout 60m

# Side-by-side benchmarks (a2redis, raw Redis Streams, asynq); refreshes docs/benchmarks.md.
bench:
	cd bench && go run ./cmd/a2bench --doc ../docs/benchmarks.md

bench-quick:
	cd bench && go run ./cmd/a2bench --quick

# In-package Go benchmarks with same-run baselines.
bench-micro:
	go test ./redisstore -run '^$$' -bench . -benchtime 2s -count 3

# staticcheck at a pinned version, run from the module cache (go run
# fetches it the first time).
STATICCHECK = honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint:
	test -z "$$(gofmt -l .)"
	go vet ./...
	go run $(STATICCHECK) ./...
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
