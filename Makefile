# bagkeeper — see README.md for what each target does.
GO        ?= go
BIN       ?= bin
GOFLAGS   ?=
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
TOOLS     := $(CURDIR)/$(BIN)/tools

PROTOS := raftstore/storepb/store.proto raftstore/peerpb/peer.proto sidecar/adminpb/admin.proto

.PHONY: all build generate check-generated
all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

$(TOOLS)/protoc-gen-go:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(TOOLS)/protoc-gen-go-grpc:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

# generate regenerates the protobuf code. Needs protoc (Debian: protobuf-compiler).
generate: $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc
	PATH=$(TOOLS):$$PATH protoc --go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative $(PROTOS)

# check-generated fails if the checked-in generated code is stale.
check-generated: generate
	git diff --exit-code -- '*.pb.go' || { echo "generated code is stale: run make generate and commit"; exit 1; }
