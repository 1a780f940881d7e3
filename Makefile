# collbench build, test and run targets. `make help` lists them.
GO      ?= go
BIN     ?= bin/collbench
VERSION ?= 0.1.0-dev+$(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
PREFIX  ?= /usr/local
LDFLAGS := -X collbench/cmd/collbench/cli.Version=$(VERSION)
GOFILES  = $(shell git ls-files '*.go' 2>/dev/null || find . -name '*.go')

export CGO_ENABLED := 1

# A test piped through grep fails the target when the test fails. (So no
# recipe pipes into grep -q or head: the writer would die of SIGPIPE.)
SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: rendezvous-scale scale help build build-mpi install man run test test-long unit unit-quick unit-race unit-cli unit-model pages smoke drills drills-quick drills-soak simulate doctor-accuracy mpi-check mpi-quick lint fmt bench test-gpu gpu-bins plugin ptx clean

help:
	@echo "make build     build $(BIN) (no CUDA toolkit or NCCL needed)"
	@echo "make build-mpi build bin/collbench-mpi with MPI (needs libopenmpi-dev)"
	@echo "make install   install collbench, its man pages and bash/zsh/fish completion under PREFIX (default /usr/local)"
	@echo "make man       write the man pages to man/ (one per command)"
	@echo "make run       build, then a verified allreduce sweep (CPU backend where there is no GPU)"
	@echo "make test      lint (vet, gofmt, tidy, deadcode, golangci-lint), unit tests with -short (-race but for the cli package), the report pages, a smoke run, each doctor drill once and the MPI check's short form (under 5 min on 2 cores)"
	@echo "make test-long the long tiers: every unit test with -race, every drill at every place and a 64-process world, doctor on the cluster model at 1,024 hosts (full and quick), the whole MPI check (about 30 min)"
	@echo "make drills-soak  every doctor drill 6 times, one at a time (about 11 min)"
	@echo "make simulate  doctor on the cluster model: every fault kind at 1,024 hosts x 8 GPUs, 10 seeds; clean seeds; the scale table to 4,096 hosts (about 13 min)"
	@echo "make doctor-accuracy  doctor over 1,000 seeded modeled hosts per fault kind: how often it is right (about 30 min)"
	@echo "make bench     CPU backend benchmarks (GB/s), and how late a timed start's wait returns (µs)"
	@echo "make scale     worlds of 64, 128 and 256 processes on this machine: formation, sweep, verify-groups, doctor, a stopped rank, memory, rank 0's sockets"
	@echo "make rendezvous-scale  the bootstrap tree of 1,024, 4,096 and 8,192 in-process members, and rank 0's own cost"
	@echo "make test-gpu  the GPU test run (needs GPUs and NCCL; logs under \$$OUT or ./gpu-logs)"
	@echo "make gpu-bins  build bin/collbench, bin/collbench-mpi, bin/nccl.test and the watch plugin for a GPU machine"
	@echo "make plugin    build collbench watch's NCCL profiler plugin, bin/libcollbench-watch.so (NCCL_PROFILER_PLUGIN)"
	@echo "make ptx       regenerate the embedded PTX from backend/nccl/kernels/verify.cu (clang)"
	@echo "make fmt       gofmt the tree"

# No -trimpath here: its builds share nothing with the tests' in the build
# cache (from an empty cache it cost make test a second compile of the
# standard library and every module, about 30 s on 2 cores). make install
# builds with it.
BUILDFLAGS ?=
build:
	$(GO) build $(BUILDFLAGS) -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/collbench

# collbench watch's NCCL profiler plugin, and collbench's tuner for an
# application: a shared library any NCCL application loads
# (NCCL_PROFILER_PLUGIN and NCCL_TUNER_PLUGIN=bin/libcollbench-watch.so);
# collbench watch --plugin-path finds it beside the binary.
PLUGIN ?= $(dir $(BIN))libcollbench-watch.so
plugin:
	$(GO) build $(BUILDFLAGS) -buildmode=c-shared -ldflags "-s -w" -o $(PLUGIN) ./cmd/collbench-watch-plugin
	rm -f $(PLUGIN:.so=.h)

# The MPI build (needs Debian's libopenmpi-dev): mpirun -np N bin/collbench-mpi ...
MPI_CFLAGS = $(shell pkg-config --cflags ompi 2>/dev/null || echo -I/usr/lib/x86_64-linux-gnu/openmpi/include)
MPI_LIBS   = $(shell pkg-config --libs ompi 2>/dev/null || echo -lmpi)
build-mpi:
	CGO_CFLAGS="$(MPI_CFLAGS)" CGO_LDFLAGS="$(MPI_LIBS)" $(GO) build -tags mpi $(BUILDFLAGS) -ldflags "$(LDFLAGS)" -o bin/collbench-mpi ./cmd/collbench

man: build
	./$(BIN) man --dir man

install:
	$(MAKE) --no-print-directory build man BUILDFLAGS=-trimpath
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/collbench
	$(MAKE) --no-print-directory plugin BUILDFLAGS=-trimpath
	install -D -m 0755 $(PLUGIN) $(DESTDIR)$(PREFIX)/lib/collbench/libcollbench-watch.so
	install -d $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 0644 man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -d $(DESTDIR)$(PREFIX)/share/bash-completion/completions $(DESTDIR)$(PREFIX)/share/zsh/site-functions $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	./$(BIN) completion bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/collbench
	./$(BIN) completion zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_collbench
	./$(BIN) completion fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/collbench.fish
	@echo "installed $(DESTDIR)$(PREFIX)/bin/collbench ($$($(DESTDIR)$(PREFIX)/bin/collbench --version))"

run: build
	./$(BIN) allreduce --sizes 8:32M

# The newcomer's test (at most 5 minutes on 2 cores with a warm build
# cache): every path once. test-long runs the long tiers; CI runs both.
# Lint beside the unit tests (whose last minute is one package of tests
# that mostly wait), then the MPI check's short form there (about 45 s,
# 7 s of it on a core: it waits on mpirun and a planted hang's bound);
# the browser and the smoke run side by side; then the drills alone: doctor's verdicts judge speeds, and with the
# smoke run and the MPI check beside them a planted slow link on 2 cores
# once ran as fast as its loaded healthy peers. Each job's output is kept
# together.
test:
	$(MAKE) --no-print-directory -j2 --output-sync=target unit-quick lint mpi-quick
	$(MAKE) --no-print-directory -j2 --output-sync=target pages smoke
	$(MAKE) --no-print-directory drills-quick

test-long: unit drills simulate mpi-check

# Four test binaries at once, and four parallel tests in each, on any core
# count: many tests wait (on timeouts, on processes of their own) more than
# they compute. Three test processes side by side: the race run of every
# package but the cli package (unit-race); the cli package without the
# detector (unit-cli), whose tests go end to end through the command line
# into the backends, the engine, the watch collector and launch, whose
# concurrency their own packages' tests run under the detector (under it
# the package cost about 105 s of a core, 57 s without; its fake-GPU
# tests run one at a time, as they share the profiler plugin's recorder);
# and the model's long runs (MODEL_SEARCH_TESTS, unit-model), which skip
# under -race in the first, then under the detector the cli package's
# tests of the concurrency of its own (CLI_RACE_TESTS: the signal
# goroutine of MainWith and the document it writes on an exit that cannot
# wait). make test-long runs every test under the detector. The cli
# package's race-built tests are compiled first: two go commands started
# together from an empty cache would each compile every package they
# share (the plain tests' packages are those make run builds first).
unit-quick:
	$(GO) test -race -count=1 -run '^$$' ./cmd/collbench/cli > /dev/null
	$(MAKE) --no-print-directory -j3 --output-sync=target unit-race unit-cli unit-model

CLI_RACE_TESTS = ^(TestInterruptedRunKeepsRows|TestSignalEndsACommandBlockedOnARead|TestFault(SecondSignalExitsAtOnce|SignalAtALargeSizeIsPrompt|KilledRunAlwaysLeavesAValidFile|LaunchExitsAsItsSignalSays)|TestTuneCtrlCKeepsWhatWasMeasured)$$

# Without the browser's package: make pages runs its tests, and built
# with -race its driver (chromedp, cdproto) costs 45 s of a core from an
# empty build cache.
unit-race:
	$(GO) test -race -short -count=1 -p 4 -parallel 4 $$($(GO) list ./... | grep -v -e '/internal/pagecheck$$' -e '/cmd/collbench/cli$$')

unit-cli:
	$(GO) test -short -count=1 -parallel 4 -skip '$(CLI_RACE_TESTS)' ./cmd/collbench/cli

# The model's runs end first: the cli package's race-run tests follow them.
unit-model:
	$(GO) test -short -count=1 -parallel 4 -run '$(MODEL_SEARCH_TESTS)' ./engine ./backend/cpu ./backend/nccl ./doctor
	$(GO) test -race -short -count=1 -parallel 4 -run '$(CLI_RACE_TESTS)' ./cmd/collbench/cli

# Tests that run a model many times over, or render one of 8,192 ranks
# (racebuild.SkipLongModelRun): 120 s of the race run's tests together,
# 15 s without the detector. And the tests over every type and reduction,
# which the race run takes on a few of them (racebuild.Few): the whole
# matrix here, without the detector.
MODEL_SEARCH_TESTS = ^(TestDoctorAccuracy|TestSimulateNamesEachFaultSmall|TestSimulateQuickNamesEachFaultSmall|TestSimulateBusyFabric|TestTuneFindsTheChunkSize|TestTuneForcesNCCLThroughItsTunerPlugin|TestAlgorithmsByTheirTraffic|TestFakeTimedRepetitionsMissTheCache|TestReportAtScale|TestGPUEveryCollectiveDTypeOp|TestEveryCollectiveTypeAndOpVerifies|TestDistributedEveryCollectiveVerifies)$$

unit:
	$(GO) test -race -count=1 ./...
	$(GO) test -count=1 -run 'TestRendezvousOf1024Members' -v ./bootstrap | grep -E 'formed a world|^(ok|FAIL|---)'

# The report pages in headless Chromium (internal/pagecheck): every kind of
# page opened at 1,280 x 900, with a screenshot of each in $(SCREENSHOTS)
# for a person to look at. Skipped with one line where no Chromium is
# installed (apt-get install chromium), unless REQUIRE_BROWSER=1 (CI).
# PAGES="a.html b.html" checks those pages too (reports of real runs).
SCREENSHOTS ?= $(CURDIR)/page-screenshots
pages:
	COLLBENCH_SCREENSHOTS=$(SCREENSHOTS) COLLBENCH_PAGES="$(PAGES)" $(GO) test -count=1 -run 'TestReportPagesInABrowser|TestGivenPages|TestCheckerSeesWhatIsWrong' -v ./internal/pagecheck | grep -E 'pages_test|^(ok|FAIL|---|panic)|skipped'
	@echo "pages: screenshots in $(SCREENSHOTS)"

# The binary must start and run on a machine without NCCL or a GPU driver.
# Its sweeps verify every row; 2 timed iterations each are enough for that
# (the default 20 cost 13 s more of make test on 2 cores).
smoke: build
	@if command -v python3 > /dev/null; then python3 -W error scripts/paritylib_test.py && python3 -W error scripts/busbwcmp_test.py && python3 -W error scripts/parity_test.py && python3 -W error scripts/watchplants_test.py; else echo "smoke: no python3, the parity scripts, the busbw judges and the watch plants judge not tested"; fi
	./$(BIN) version
	./$(BIN) env
	./$(BIN) allreduce --sizes 8:64K -n 2 -w 1 > /dev/null
	./$(BIN) sweep --collectives all --sizes 1K,64K -n 1 -w 0 --dtype all --op all > /dev/null
	./$(BIN) launch -n 4 --nodes 2 -- allreduce --backend cpu --sizes 1K,64K -n 2 --rank-list cross-node | grep "wrong elements:    0 (OK)" > /dev/null
	@echo "smoke: the cpu backend across 4 processes (peer-to-peer over TCP), every row verified"
	./$(BIN) launch -n 4 -- allreduce --backend cpu --sizes 8:16M -n 2 -w 1 -q | grep "wrong elements:    0 (OK)" > /dev/null
	test "$$(./$(BIN) launch -n 4 -- sweep --backend cpu --collectives all --sizes 1K:4M:x4 -n 2 -w 1 -q | grep -c 'wrong elements:    0 (OK)')" = 11
	test "$$(./$(BIN) launch -n 4 -- sweep --backend cpu --collectives all --sizes 1K,1M,4M --rank-list '[[0,1],[2,3]]' -n 2 -w 1 -q | grep -c 'wrong elements:    0 (OK)')" = 11
	@echo "smoke: ok"

# collbench doctor against planted faults, on the built binary: each fault
# kind once at each of its 2-3 places (ranks, pairs, hosts) in worlds of 8
# processes over 2 simulated hosts and 6 over 3, clean runs at 2 places; and
# a rank that hangs, stops or dies at 8 places, whose verdict must still be
# written. Two drills run side by side (DRILL_PARALLEL). The delayed link is 20 ms: at 5 ms a clean-clone CI run on 2 cores missed it in 1 of 3 runs.
DRILL_PARALLEL ?= 2
drills: build
	COLLBENCH_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 20m -parallel $(DRILL_PARALLEL) -run 'Drill|FaultReports' -v ./drills | grep -E 'named exactly|^(ok|FAIL|---|panic)|doctor_test|scale_test|evidence:|^\s*(FAIL|WARN) |# collbench doctor'

# Each drill once, at its first place; no 64-process world (make test).
drills-quick: build
	COLLBENCH_DRILL_RUNS=1 COLLBENCH_BIN=$(CURDIR)/$(BIN) $(GO) test -short -count=1 -timeout 20m -parallel $(DRILL_PARALLEL) -run 'Drill|FaultReports' -v ./drills | grep -E 'named exactly|^(ok|FAIL|---|panic)|doctor_test|scale_test|evidence:|^\s*(FAIL|WARN) |# collbench doctor'

# The drills as a soak: every case 6 times (its places two or three times
# each), one at a time, about 11 minutes on 2 cores.
drills-soak: build
	COLLBENCH_DRILL_RUNS=6 COLLBENCH_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 40m -parallel 1 -run 'Drill|FaultReports' -v ./drills | grep -E 'named exactly|^(ok|FAIL|---|panic)|doctor_test|scale_test|evidence:|^\s*(FAIL|WARN) |# collbench doctor'

# doctor on the cluster model (docs/simulate.md): every fault kind planted
# at once on 1,024 hosts x 8 GPUs for 10 seeds, 10 clean seeded clusters,
# both in full and in quick mode, and the table of rounds and modelled time
# from 16 to 4,096 hosts (engine/testdata/simulate-scale.golden; UPDATE=1
# rewrites it). About 29 minutes on 2 cores (measured 2026-11-27).
simulate:
	COLLBENCH_SIMULATE=1 $(GO) test -count=1 -timeout 45m -run 'TestSimulate' -v ./engine $(if $(UPDATE),-args -update-simulate) | grep -E 'simulate_test|^(ok|FAIL|---|panic)'

# How often doctor is right: full doctor runs over 1,000 seeded modeled
# 8-GPU hosts per kind (healthy, and one fault of each kind at a random
# place); writes the table to doctor-accuracy.md. About 30 minutes on 2 cores.
ACCURACY ?= 1000
doctor-accuracy:
	COLLBENCH_ACCURACY=$(ACCURACY) COLLBENCH_ACCURACY_QUICK=$(if $(QUICK),1,) COLLBENCH_ACCURACY_OUT=$(CURDIR)/doctor-accuracy$(if $(QUICK),-quick,).md $(GO) test -count=1 -timeout 3h -run TestDoctorAccuracy -v ./engine | grep -vE '^=== (RUN|PAUSE|CONT)'

# The MPI build under mpirun (scripts/mpi-check.sh): every collective on
# --backend mpi verified from 8 B to 64 MiB, groups, a hung, a stopped and a
# killed rank named, the cpu backend under mpirun. Skipped (with a note)
# where Open MPI is not installed, unless REQUIRE_MPI=1 (CI).
mpi-quick:
	@$(MAKE) --no-print-directory mpi-check QUICK=1

mpi-check:
	@if ! command -v mpirun >/dev/null 2>&1 || ! pkg-config --exists ompi 2>/dev/null; then \
		if [ "$(REQUIRE_MPI)" = 1 ]; then echo "mpi-check: Open MPI is missing (apt-get install libopenmpi-dev openmpi-bin)"; exit 1; fi; \
		echo "mpi-check: skipped, Open MPI not installed (apt-get install libopenmpi-dev openmpi-bin)"; exit 0; fi; \
	$(MAKE) --no-print-directory build-mpi && QUICK=$(QUICK) scripts/mpi-check.sh bin/collbench-mpi

# vet, gofmt, a tidy module, no dead code, and golangci-lint (.golangci.yml:
# the standard linters and gosec); the two tools are installed into
# $(go env GOPATH)/bin at pinned versions when missing.
GOBIN_DIR = $(shell $(GO) env GOPATH)/bin
GOLANGCI  = $(GOBIN_DIR)/golangci-lint
DEADCODE  = $(GOBIN_DIR)/deadcode
lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $(GOFILES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) mod tidy -diff
	@test -x $(DEADCODE) || $(GO) install golang.org/x/tools/cmd/deadcode@v0.30.0
	@out=$$($(DEADCODE) -test ./...); if [ -n "$$out" ]; then echo "dead code:"; echo "$$out"; exit 1; fi
	@test -x $(GOLANGCI) || $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.6.2
	$(GOLANGCI) run ./...

fmt:
	gofmt -w $(GOFILES)


bench: build
	$(GO) test -run '^$$' -bench . -benchtime 200x ./backend/cpu/
	$(GO) test -run '^$$' -bench WaitUntilLateness -benchtime 200x ./backend/nccl/
	scripts/cpu-bench.sh $(BIN)

# GPU test run. Where Go is installed the binaries are rebuilt first; on a GPU
# machine without Go, carry bin/ there (make gpu-bins) and run this target.
test-gpu:
	@if command -v $(GO) >/dev/null 2>&1; then $(MAKE) gpu-bins; fi
	scripts/gpu-test.sh

# Stripped (-s -w; panics still name their functions): the three binaries,
# the plugin and NCCL's benchmark's source must fit what a lent machine
# takes along (64 MiB).
gpu-bins: plugin
	$(MAKE) --no-print-directory build build-mpi LDFLAGS="-s -w $(LDFLAGS)"
	$(GO) test -c -ldflags "-s -w" -o bin/nccl.test ./backend/nccl

# Regenerate the embedded PTX of the GPU fill/check kernels (needs clang with NVPTX).
CLANG ?= clang-14
# ptx also rebuilds the host copy of the kernels (hostemu includes verify.cu
# from its parent folder, which Go's build cache does not watch).
ptx:
	$(CLANG) -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_70 -O3 -S \
		-o backend/nccl/kernels/verify.ptx backend/nccl/kernels/verify.cu
	$(GO) build -a ./backend/nccl/kernels/hostemu

clean:
	rm -rf bin man

# The rendezvous of in-process members at 1,024, 4,096 and 8,192 ranks: how
# long it forms, the connections rank 0 holds, an allgather and the close.
# 8,192 members in one process need about 25,000 file descriptors.
RENDEZVOUS_SIZES ?= 1024,4096,8192
rendezvous-scale:
	COLLBENCH_RENDEZVOUS_SIZES=$(RENDEZVOUS_SIZES) $(GO) test -count=1 -timeout 30m -run 'TestRendezvousAtScale|TestRendezvousRootCost' -v ./bootstrap | grep -E 'members:|^(ok|FAIL|---)'

# Worlds of 64, 128 and 256 real processes on this machine: formation,
# a sweep, verify-groups, doctor --quick, a stopped rank; memory per
# process and rank 0's sockets (scripts/scale.sh).
scale: build
	scripts/scale.sh 64 128 256
