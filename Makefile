# bagkeeper — see README.md for what each target does.
GO        ?= go
BIN       ?= bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
STATICCHECK_VERSION        := v0.7.0
TOOLS     := $(CURDIR)/$(BIN)/tools

PROTOS := raftstore/storepb/store.proto raftstore/peerpb/peer.proto sidecar/adminpb/admin.proto agent/toolpb/tools.proto sidecar/link/linkpb/link.proto

.PHONY: all build test lint vet generate check-generated demo bench soak soak-linearizable soak-memory fuzz clean image pods-test
all: build

## build: the bagkeeper binary in bin/
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

## image: the container image bagkeeper:$(VERSION) (also tagged
## bagkeeper:dev), FROM scratch: bin/bagkeeper and bin/jujuc, Debian's static
## busybox with its applets linked in /bin (a shell for charm hooks), the
## demo charm in /opt/charm, user and group bagkeeper (65532). Needs Docker
## and Debian's busybox-static. The legacy builder (DOCKER_BUILDKIT=0): the
## docker CLI falls back to it anyway without the buildx plugin; said here so
## a machine with buildx builds the same way. The image pulls nothing.
IMAGE       ?= bagkeeper
BUSYBOX     ?= /bin/busybox
IMAGE_STAGE := $(BIN)/image
image: build
	@file -L $(BUSYBOX) 2>/dev/null | grep -q 'statically linked' || \
		{ echo "image: no static busybox at $(BUSYBOX): apt-get install busybox-static"; exit 1; }
	rm -rf $(IMAGE_STAGE) && mkdir -p $(IMAGE_STAGE)/rootfs/bin $(IMAGE_STAGE)/rootfs/etc $(IMAGE_STAGE)/rootfs/opt $(IMAGE_STAGE)/rootfs/tmp
	cp $(BIN)/bagkeeper $(BIN)/jujuc $(BUSYBOX) $(IMAGE_STAGE)/rootfs/bin/
	for a in $$($(BUSYBOX) --list); do [ -e $(IMAGE_STAGE)/rootfs/bin/$$a ] || ln -s busybox $(IMAGE_STAGE)/rootfs/bin/$$a; done
	cp -r test/demo/charm $(IMAGE_STAGE)/rootfs/opt/charm
	printf 'root:x:0:0:root:/root:/bin/sh\nbagkeeper:x:65532:65532:bagkeeper:/nonexistent:/bin/false\n' >$(IMAGE_STAGE)/rootfs/etc/passwd
	printf 'root:x:0:\nbagkeeper:x:65532:\n' >$(IMAGE_STAGE)/rootfs/etc/group
	chmod 1777 $(IMAGE_STAGE)/rootfs/tmp
	cp build/image/Dockerfile $(IMAGE_STAGE)/
	DOCKER_BUILDKIT=0 docker build -q --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION) -t $(IMAGE):dev $(IMAGE_STAGE)
	@size=$$(docker image inspect -f '{{.Size}}' $(IMAGE):$(VERSION)); \
		echo "image $(IMAGE):$(VERSION) (also $(IMAGE):dev): $$((size / 1000000)) MB ($$size bytes)"; \
		[ $$size -le 30000000 ] || { echo "image: larger than 30 MB"; exit 1; }

## pods-test: the container e2e tests (test/pods): the demo chart's pod
## template run as Docker containers of the image, through rolling updates,
## killed sidecars, paused and disconnected pods, recreated pods with and
## without their volumes, and certificate rotation. Needs a Docker daemon.
## With -race, like every other test: it watches only the test process (the
## sidecars are the image's binaries), whose time goes to waiting on Docker,
## so it costs nothing measurable (TestPodsNoPersistence: 50.4 s without,
## 50.6 s with).
pods-test: image
	$(GO) test -race -count=1 -timeout 30m ./test/pods/

## test: every test, with the race detector: unit and in-process cluster
## tests, then the process-level e2e suite on its own (its raft processes
## need the machine to themselves); the tests that skip themselves under the
## race detector (too slow with it) run once more without it; then the
## Helm charts' tests (chart-test)
test: vet
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v -e /test/e2e -e /test/pods)
	$(GO) test -count=1 -run 'TestLargestReply' ./agent/
	$(MAKE) e2e
	$(MAKE) chart-test

## e2e: the process-level suite alone. With E2E_LOG=FILE (CI sets it) its
## -v output goes to FILE and what is printed is the output of each failed
## test, the result and the slowest tests.
.PHONY: e2e
e2e:
ifdef E2E_LOG
	@echo "$(GO) test -race -count=1 -timeout 20m -v ./test/e2e/ >$(E2E_LOG) 2>&1"
	@$(GO) test -race -count=1 -timeout 20m -v ./test/e2e/ >$(E2E_LOG) 2>&1; s=$$?; awk -f test/e2e/summary.awk $(E2E_LOG); exit $$s
else
	$(GO) test -race -count=1 -timeout 20m ./test/e2e/
endif

vet:
	$(GO) vet ./...

## chart-test: the Helm charts rendered and checked (their own module, charts/test)
.PHONY: chart-test
chart-test:
	$(GO) -C charts/test test -count=1 ./...

## model: the Promela model of unit claims, takeover, fencing, the lease and
## membership (test/model/claims.pml) checked exhaustively by spin, for
## Deployment and StatefulSet pods: state-vector size, states stored and
## time of each; then model-mutants. Needs spin and gcc (Debian: spin).
## MODEL_FAULTS (default 1) and MODEL_STS_FAULTS (default 2) bound the
## faults injected (Deployment and mutants; StatefulSet).
.PHONY: model model-mutants
model:
	test/model/check.sh model
	test/model/check.sh mutants

## model-mutants: each mutant of the model (fencing dropped, no scale cap,
## the lease tied to the raft leader, removal without compare-and-set, joins
## as voters, no release of an unreachable holder's unit) must give spin a
## counterexample; prints each trail's end
model-mutants:
	test/model/check.sh mutants

## lint: gofmt, go vet and staticcheck
lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

## demo: sidecars on loopback, in two parts: three pods of one application,
## one replaced by an empty pod on a new address; then a consumer application
## whose pods are all replaced while related to a database provider (with a
## throwaway PostgreSQL when it is installed; DEMO_POSTGRESQL=no leaves it
## out): nothing departs, nothing is revoked, the credentials stay the same
demo: build
	test/demo/demo.sh $(BIN)/bagkeeper

## bench: side-by-side benchmarks with etcd (needs Debian's etcd-server), then
## relation-get exec'd from Go against a hello-world binary, relation-get and
## relation-set called from a bash loop, as in a hook, against a real agent
## beside the same loop exec'ing hello-world, secret-get against a real agent
## likewise, then the cost of the log entries' checksums; then, where a
## Docker daemon answers, the pods of the chart as containers (bench-pods);
## prints the tables for BENCHMARKS.md, and plots commit latency against
## writers into docs/commit-latency.svg
bench:
	$(GO) run ./test/bench -writers=1,4,16,64
	$(GO) test -run '^$$' -bench Startup -benchtime 500x ./cmd/jujuc
	$(GO) test -run '^$$' -bench HookCalls -benchtime 20x ./agent
	$(GO) test -run '^$$' -bench SecretGet -benchtime 500x ./agent
	$(GO) test -run '^$$' -bench Entry -benchmem ./test/bench
	$(GO) test -run '^$$' -bench BagMemory -benchtime 1x ./raftstore/state
	@if docker info >/dev/null 2>&1; then $(MAKE) bench-pods; else echo "bench-pods SKIPPED: no Docker daemon"; fi

## bench-pods: the image's size, an idle sidecar's memory and CPU in a
## container with the chart's limits, and a wiped pod's time to ready with
## every bag, with TLS and with a join token
.PHONY: bench-pods
bench-pods: image
	$(GO) test -count=1 -v -run TestPodsBench ./test/pods/ -pods.bench

## soak: long runs: the fault runs of SOAK_DURATION (default 10m) each, then
## the memory soak of SOAK_MEMORY_DURATION (default 30m); a failing fault run
## leaves what it found under bin/soak. Raise SOAK_TIMEOUT for runs of hours.
SOAK_DURATION        ?= 10m
SOAK_TIMEOUT         ?= 2h
SOAK_MEMORY_DURATION ?= 30m
soak: soak-linearizable soak-memory

## soak-linearizable: bag reads and writes checked for linearizability
## (porcupine) while members are killed, paused and wiped
soak-linearizable:
	mkdir -p $(BIN)/soak
	BAGKEEPER_SOAK_DURATION=$(SOAK_DURATION) $(GO) test -count=1 -v -timeout $(SOAK_TIMEOUT) \
		-run '^TestLinearizableBagsUnderFaults$$' -artifacts -outputdir $(CURDIR)/$(BIN)/soak ./test/e2e/

## soak-memory: a 3-member group written at the highest rate it sustains
## (found by a short ramp) over a bounded key space, so the live state stays
## the same while the raft log churns; every member's RSS (anon, file) and data
## dir sampled every 10 s into bin/soak/memory-*.csv, plotted to
## docs/soak-memory.svg; prints PASS/FAIL per target and exits 0 either way
soak-memory:
	mkdir -p $(BIN)/soak
	$(GO) run ./test/bench -targets bagkeeper -experiments soak \
		-soak-duration $(SOAK_MEMORY_DURATION) -soak-out $(BIN)/soak -soak-svg docs/soak-memory.svg

## fuzz: run each fuzz target for a while (FUZZTIME=30s)
FUZZTIME ?= 30s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
			echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

$(TOOLS)/protoc-gen-go:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(TOOLS)/protoc-gen-go-grpc:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

## generate: regenerate the protobuf code (needs protoc; Debian: protobuf-compiler)
generate: $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc
	PATH=$(TOOLS):$$PATH protoc --go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative $(PROTOS)

## check-generated: fail if the checked-in generated code is stale
check-generated: generate
	@git diff --exit-code -- '*.pb.go' || { echo "generated code is stale: run 'make generate' and commit"; exit 1; }

clean:
	rm -rf $(BIN) .demo
