# collbench build, test and run targets. `make help` lists them.
GO      ?= go
BIN     ?= bin/collbench
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X collbench/cmd/collbench/cli.Version=$(VERSION)
GOFILES  = $(shell git ls-files '*.go' 2>/dev/null || find . -name '*.go')

export CGO_ENABLED := 1

.PHONY: help build run test unit smoke lint fmt bench test-gpu gpu-bins ptx clean

help:
	@echo "make build     build $(BIN) (no CUDA toolkit or NCCL needed)"
	@echo "make run       build, then a verified allreduce sweep (CPU backend where there is no GPU)"
	@echo "make test      lint, unit tests with -race, and a smoke run of the built binary"
	@echo "make bench     CPU backend benchmarks (GB/s)"
	@echo "make test-gpu  the GPU test run (needs GPUs and NCCL; logs under \$$OUT or ./gpu-logs)"
	@echo "make gpu-bins  build bin/collbench and bin/nccl.test for a GPU machine"
	@echo "make ptx       regenerate the embedded PTX from nccl/kernels/verify.cu (clang)"
	@echo "make fmt       gofmt the tree"

build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/collbench

run: build
	./$(BIN) allreduce --sizes 8:32M

test: lint unit smoke

unit:
	$(GO) test -race -count=1 ./...

# The binary must start and run on a machine without NCCL or a GPU driver.
smoke: build
	./$(BIN) version
	./$(BIN) env
	./$(BIN) allreduce --sizes 8:64K -n 2 -w 1 > /dev/null
	./$(BIN) sweep --collectives all --sizes 1K,64K -n 1 -w 0 --dtype all --op all > /dev/null
	@echo "smoke: ok"

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $(GOFILES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

fmt:
	gofmt -w $(GOFILES)

bench:
	$(GO) test -run '^$$' -bench . -benchtime 200x ./backend/cpu/

# GPU test run. Where Go is installed the binaries are rebuilt first; on a GPU
# machine without Go, carry bin/ there (make gpu-bins) and run this target.
test-gpu:
	@if command -v $(GO) >/dev/null 2>&1; then $(MAKE) gpu-bins; fi
	scripts/gpu-test.sh

gpu-bins: build
	$(GO) test -c -o bin/nccl.test ./nccl

# Regenerate the embedded PTX of the GPU fill/check kernels (needs clang with NVPTX).
CLANG ?= clang-14
ptx:
	$(CLANG) -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_70 -O3 -S \
		-o nccl/kernels/verify.ptx nccl/kernels/verify.cu

clean:
	rm -rf bin
