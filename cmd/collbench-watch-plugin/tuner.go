package main

import "C"

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	nccltuner "collbench/backend/nccl/tuner"
	"collbench/internal/bounded"
	"collbench/tunefile"
)

// envTunerFile names the tuner file the library's tuner applies: tune's
// format, which is NCCL's example tuner plugin's (collbench tune
// --tuner-file writes it).
const envTunerFile = "COLLBENCH_TUNER_FILE"

// tunerRead bounds the wait for the tuner file (a named pipe nobody
// writes holds NCCL's first communicator no longer than this).
const tunerRead = 5 * time.Second

var tunerLoad sync.Once

// cbwTunerLoad reads the tuner file once, at NCCL's first question to the
// tuner, and gives its lines to the tuner. A file that cannot be read or
// is not a tuner file costs one line on stderr, and NCCL runs its own
// choices: the job is never stopped by it.
//
//export cbwTunerLoad
func cbwTunerLoad() {
	tunerLoad.Do(func() {
		lines, err := readTunerFile(os.Getenv)
		if err != nil {
			fmt.Fprintf(os.Stderr, "collbench tuner: %v; NCCL runs its own choices\n", err)
			return
		}
		nccltuner.SetLines(lines)
	})
}

// readTunerFile reads the file envTunerFile names (none: no lines).
func readTunerFile(getenv func(string) string) ([]nccltuner.Line, error) {
	path := strings.TrimSpace(getenv(envTunerFile))
	if path == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), tunerRead)
	defer cancel()
	fh, release, err := bounded.Open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w", envTunerFile, path, err)
	}
	defer release()
	data, err := bounded.Read(fh, path, bounded.Config)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w", envTunerFile, path, err)
	}
	es, err := tunefile.Read(strings.NewReader(string(data)), envTunerFile+"="+path)
	if err != nil {
		return nil, err
	}
	return tunefile.Lines(es), nil
}
