# gyre — build and test entry points. `make test` is what CI runs.
#
#   make test                 whole suite, race detector, against throwaway
#                             PostgreSQL and S3 servers (scripts/testenv.sh)
#   make test TESTFLAGS=-v    extra `go test` flags (also PKGS=./internal/...)
#   make build | vet | fmt-check | bench | bench-gateway | bench-eval-memory | bench-datasets | bench-ui | fuzz-smoke

GO         ?= go
PKGS       ?= ./...
TESTFLAGS  ?=
BENCHFLAGS ?=
# FUZZ_TARGETS lists pkg:FuzzName pairs run by fuzz-smoke, e.g.
#   ./atif:FuzzParse ./flywheel:FuzzValidate
# Every intake parser is fuzzed (SPEC §12); CI runs each for FUZZTIME.
# FUZZTIME is an execution count (Nx), not a duration: with a duration,
# Go 1.26's fuzz coordinator can fail a clean run with "context deadline
# exceeded" as the time runs out (golang/go#75804, fixed in Go 1.27).
FUZZ_TARGETS ?= ./internal/api:FuzzTurnsIntake ./internal/jcs:FuzzAppendCanonical ./internal/jcs:FuzzCanonicalizerChecked ./internal/rollout:FuzzOutputIntake \
	./flywheel:FuzzValidateProductionTurnBatch ./flywheel:FuzzValidateRolloutOutput \
	./internal/jcs:FuzzCanonicalize ./internal/suite:FuzzParseSuite ./internal/grade:FuzzParseSpecs \
	./internal/api:FuzzDecodeObject ./internal/auth:FuzzParseBearer ./internal/blobstore:FuzzValidateKey \
	./internal/gateway:FuzzParseChatRequest ./internal/gateway:FuzzSSEStream ./internal/gateway:FuzzDecodeChunk \
	./internal/gateway:FuzzValidJSON ./atif:FuzzValidate \
	./internal/eval:FuzzDecodeRunStatus ./internal/eval:FuzzWorkspacePath \
	./flywheel:FuzzParseReport ./harnesskit:FuzzPostRuns ./harnesskit:FuzzListQuery \
	./internal/harnesscheck:FuzzPathProblem ./internal/harnesscheck:FuzzTitleProbe
FUZZTIME     ?= 20000x

.PHONY: all test build vet fmt-check bench bench-gateway bench-eval-memory bench-datasets bench-ui fuzz-smoke

all: fmt-check vet build test

test:
	scripts/testenv.sh $(GO) test -race -count=1 -timeout 30m $(TESTFLAGS) $(PKGS)

build:
	$(GO) build -o bin/gyre ./cmd/gyre

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(find . -name '*.go' -not -path './.git/*' -not -path '*/testdata/*' -not -path './vendor/*' -print0 | xargs -0r gofmt -l); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

bench:
	$(GO) test -run='^$$' -bench=. $(BENCHFLAGS) $(PKGS)

# bench-gateway measures the latency the LLM gateway adds: the same load
# sent to a local upstream stub directly and through the gateway (recording
# on), non-streaming and streaming, in one protocol (-protocol chat, the
# default, responses or messages); e.g. GWBENCHFLAGS='-rate 1000 -duration 10s'.
GWBENCHFLAGS ?=
bench-gateway:
	$(GO) run ./internal/gateway/gwbench $(GWBENCHFLAGS)

# bench-eval-memory measures the evaluator's peak RSS and runs/s at 10,000
# and 100,000 runs (instant harness stub, concurrency 64, SQLite and file
# blobs), each measurement in a process of its own since peak RSS is per
# process; it prints the medians. Not part of CI: the 100,000-run size takes
# minutes. E.g. EVALBENCHFLAGS='-sizes 10000 -count 5'.
EVALBENCHFLAGS ?=
bench-eval-memory:
	$(GO) build -o bin/evalbench ./internal/eval/evalbench
	bin/evalbench $(EVALBENCHFLAGS)

# bench-datasets measures the sft dataset export on SQLite and file blobs:
# rows/s of the build and peak RSS at 10,000 and 100,000 seeded
# training-grade rollouts of two completions each, each measurement in a
# process of its own; it prints the medians. Not part of CI: seeding
# 100,000 rollouts takes minutes. E.g. DATASETBENCHFLAGS='-sizes 10000 -count 5'.
DATASETBENCHFLAGS ?=
bench-datasets:
	$(GO) build -o bin/datasetbench ./internal/dataset/build/datasetbench
	bin/datasetbench $(DATASETBENCHFLAGS)

# bench-ui measures the web UI's server time per page (median and p95,
# in-process, SQLite and file blobs) over a store seeded with 100,000
# training-grade rollouts by the dataset benchmark's seeder, 10,000
# experiment runs, turns and a dataset. Not part of CI: seeding takes
# minutes. UIBENCHFLAGS='-data DIR' keeps the store to measure it again
# without seeding; e.g. UIBENCHFLAGS='-rollouts 10000 -data /tmp/uibench'.
UIBENCHFLAGS ?=
bench-ui:
	$(GO) run ./internal/ui/uibench $(UIBENCHFLAGS)

fuzz-smoke:
	@set -e; \
	if [ -z "$(strip $(FUZZ_TARGETS))" ]; then echo "fuzz-smoke: no FUZZ_TARGETS"; exit 0; fi; \
	for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t#*:}; \
		echo "fuzz-smoke: $$pkg $$name ($(FUZZTIME))"; \
		$(GO) test -list="^$$name\$$" "$$pkg" | grep -qx "$$name" || \
			{ echo "fuzz-smoke: no $$name in $$pkg"; exit 1; }; \
		$(GO) test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) "$$pkg"; \
	done
