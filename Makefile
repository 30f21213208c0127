# Targets match what CI runs (.ci/run runs `make test`'s command).
.PHONY: test test-race test-short bench lint quickstart

test:
	go test ./... -count=1 -timeout 20m

test-short:
	go test ./... -short -count=1

test-race:
	go test ./... -race -count=1 -timeout 30m

bench:
	go test ./redisstore -run '^$$' -bench . -benchtime 2s -count 3

lint:
	gofmt -l . | tee /dev/stderr | (! read)
	go vet ./...

quickstart:
	go run ./examples/quickstart
