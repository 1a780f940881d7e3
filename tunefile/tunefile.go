// Package tunefile is the tuner file: the format NCCL's example tuner
// plugin reads (NCCL_TUNER_CONFIG_FILE), which collbench tune writes and
// checks, collbench determinism pins, and collbench's own tuner plugin
// applies in an application. It is small on purpose: the plugin's library
// carries it.
package tunefile

import (
	"bufio"
	nccltuner "collbench/backend/nccl/tuner"
	"collbench/internal/bounded"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// The tuner file's vocabulary, as NCCL's example tuner plugin reads it.
var (
	// Collectives are the operations the plugin tunes.
	Collectives = nccltuner.FuncNames
	// Algorithms are NCCL's algorithms by the plugin's names.
	Algorithms = nccltuner.Algorithms
	// Protocols are NCCL's protocols by the plugin's names.
	Protocols = nccltuner.Protocols
)

// Vocabulary is what a backend's tuner file may name: NCCL's algorithms
// and protocols, or the cpu backend's own (a file collbench alone reads,
// through tune --check).
type Vocabulary struct {
	Backend    string
	Algorithms []string
	Protocols  []string
}

// NCCL is the example tuner plugin's vocabulary.
var NCCL = Vocabulary{Backend: "nccl", Algorithms: Algorithms, Protocols: Protocols}

// CPU is the cpu backend's: allreduce by ring or recursive doubling, over
// TCP.
var CPU = Vocabulary{Backend: "cpu", Algorithms: []string{"ring", "recursive_doubling"}, Protocols: []string{"tcp"}}

// VocabularyOf is the vocabulary of the backend named.
func VocabularyOf(backend string) Vocabulary {
	if backend == "cpu" {
		return CPU
	}
	return NCCL
}

// Entry is one line of a tuner file: for a collective whose message size
// is in [MinBytes, MaxBytes] on NNodes nodes and NRanks ranks, run
// Algorithm with Protocol on Channels channels, in chunks of Chunk bytes.
// -1 means any (NNodes, NRanks, NumPipeOps, RegBuff) or NCCL's own choice
// (Channels); Chunk 0 is NCCL's own chunk size. The chunk is an eleventh
// field, collbench's: NCCL's example plugin reads ten and ignores it, and
// collbench's plugin applies it where NCCL asks (tuner interface 6, NCCL
// 2.30 and later).
type Entry struct {
	Collective         string
	MinBytes, MaxBytes int64
	Algorithm          string
	Protocol           string
	Channels           int
	NNodes, NRanks     int
	NumPipeOps         int
	RegBuff            int
	Chunk              int64
	Line               int // where it was read, for errors (0: made here)
}

// header names the fields, as the plugin's own files do.
const header = "# collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff"

// chunkField names the eleventh field, in the header of a file that has it.
const chunkField = ",chunkBytes"

// Read reads a tuner file: one entry per line, '#' comments and blank
// lines skipped, the last two fields optional (-1). Every problem is
// named with its line: a line not in the format, an unknown collective,
// algorithm or protocol, a range upside down, ranges of the same
// collective and dimensions that overlap.
func Read(r io.Reader, name string) ([]Entry, error) { return ReadFor(r, name, NCCL) }

// ReadFor is Read with a backend's vocabulary.
func ReadFor(r io.Reader, name string, v Vocabulary) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		e, err := parseLine(line, v)
		if err != nil {
			return nil, fmt.Errorf("%s: line %d: %v", name, n, err)
		}
		e.Line = n
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: line %d: %v", name, n+1, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no entries: expected lines of %s", name, strings.TrimPrefix(header, "# "))
	}
	if err := Overlaps(out); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	return out, nil
}

func parseLine(line string, v Vocabulary) (Entry, error) {
	f := strings.Split(line, ",")
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	if len(f) < 8 || len(f) > 11 {
		return Entry{}, fmt.Errorf("%d fields, expected 8 to 11: %s[%s]", len(f), strings.TrimPrefix(header, "# "), chunkField)
	}
	for len(f) < 10 {
		f = append(f, "-1")
	}
	if len(f) < 11 {
		f = append(f, "0")
	}
	e := Entry{Collective: strings.ToLower(f[0]), Algorithm: strings.ToLower(f[3]), Protocol: strings.ToLower(f[4])}
	if !slices.Contains(Collectives, e.Collective) {
		return e, fmt.Errorf("unknown collective %q (valid: %s)", f[0], strings.Join(Collectives, ", "))
	}
	if !slices.Contains(v.Algorithms, e.Algorithm) {
		return e, fmt.Errorf("unknown algorithm %q for the %s backend (valid: %s)", f[3], v.Backend, strings.Join(v.Algorithms, ", "))
	}
	if !slices.Contains(v.Protocols, e.Protocol) {
		return e, fmt.Errorf("unknown protocol %q for the %s backend (valid: %s)", f[4], v.Backend, strings.Join(v.Protocols, ", "))
	}
	var err error
	if e.MinBytes, err = strconv.ParseInt(f[1], 10, 64); err != nil || e.MinBytes < 0 {
		return e, fmt.Errorf("min_bytes %q is not a byte count", f[1])
	}
	if e.MaxBytes, err = strconv.ParseInt(f[2], 10, 64); err != nil || e.MaxBytes < 0 {
		return e, fmt.Errorf("max_bytes %q is not a byte count", f[2])
	}
	if e.MaxBytes < e.MinBytes {
		return e, fmt.Errorf("max_bytes %d is below min_bytes %d", e.MaxBytes, e.MinBytes)
	}
	counts := []struct {
		name, any string
		into      *int
	}{{"channels", "NCCL's choice", &e.Channels}, {"nNodes", "any", &e.NNodes}, {"nRanks", "any", &e.NRanks}, {"numPipeOps", "any", &e.NumPipeOps}}
	for i, c := range counts {
		v, err := strconv.Atoi(f[5+i])
		if err != nil || v == 0 || v < -1 {
			return e, fmt.Errorf("%s %q must be a positive count, or -1 (%s)", c.name, f[5+i], c.any)
		}
		*c.into = v
	}
	if e.RegBuff, err = strconv.Atoi(f[9]); err != nil || e.RegBuff < -1 || e.RegBuff > 1 {
		return e, fmt.Errorf("regBuff %q must be 0, 1 or -1 (any)", f[9])
	}
	if e.Chunk, err = strconv.ParseInt(f[10], 10, 64); err != nil || (e.Chunk != 0 && (e.Chunk < nccltuner.MinChunk || e.Chunk > nccltuner.MaxChunk)) {
		return e, fmt.Errorf("chunkBytes %q must be %d to %d bytes, or 0 (NCCL's own)", f[10], nccltuner.MinChunk, nccltuner.MaxChunk)
	}
	return e, nil
}

// Overlaps refuses two entries of the same collective and dimensions
// whose size ranges overlap: the plugin would take the first and the
// second would never apply.
func Overlaps(es []Entry) error {
	for i, a := range es {
		for _, b := range es[i+1:] {
			same := a.Collective == b.Collective && a.NNodes == b.NNodes && a.NRanks == b.NRanks &&
				a.NumPipeOps == b.NumPipeOps && a.RegBuff == b.RegBuff
			if same && a.MinBytes <= b.MaxBytes && b.MinBytes <= a.MaxBytes {
				return fmt.Errorf("%s: lines %d and %d overlap (%d-%d and %d-%d bytes): give each size one line", a.Collective, a.Line, b.Line,
					a.MinBytes, a.MaxBytes, b.MinBytes, b.MaxBytes)
			}
		}
	}
	return nil
}

// Write writes entries in the plugin's format, with a header and the
// comment lines given (what measured them, where, when).
func Write(w io.Writer, es []Entry, comments ...string) error {
	bw := bufio.NewWriter(w)
	for _, c := range comments {
		fmt.Fprintf(bw, "# %s\n", c)
	}
	h := header
	if slices.ContainsFunc(es, func(e Entry) bool { return e.Chunk > 0 }) {
		h += chunkField
	}
	fmt.Fprintln(bw, h)
	for _, e := range es {
		fmt.Fprintf(bw, "%s,%d,%d,%s,%s,%d,%d,%d,%d,%d", e.Collective, e.MinBytes, e.MaxBytes, e.Algorithm, e.Protocol,
			e.Channels, e.NNodes, e.NRanks, e.NumPipeOps, e.RegBuff)
		if e.Chunk > 0 {
			fmt.Fprintf(bw, ",%d", e.Chunk)
		}
		fmt.Fprintln(bw)
	}
	return bw.Flush()
}

// Match is the entry that covers a message of size bytes of coll (the
// file's name) on ranks ranks and nodes nodes, as the plugin picks it:
// the first line whose range holds the size and whose dimensions are the
// run's or -1.
func Match(es []Entry, coll string, size int64, ranks, nodes int) (Entry, bool) {
	for _, e := range es {
		if e.Collective == coll && size >= e.MinBytes && size <= e.MaxBytes &&
			(e.NRanks == -1 || e.NRanks == ranks) && (e.NNodes == -1 || e.NNodes == nodes) {
			return e, true
		}
	}
	return Entry{}, false
}

// Lines is es by NCCL's indices, for collbench's tuner plugin
// (nccltuner.SetLines); a line in another vocabulary's words (a cpu
// file's) is left out.
func Lines(es []Entry) []nccltuner.Line {
	out := make([]nccltuner.Line, 0, len(es))
	for _, e := range es {
		f, ok := nccltuner.Funcs[e.Collective]
		a, p := slices.Index(Algorithms, e.Algorithm), slices.Index(Protocols, e.Protocol)
		if !ok || a < 0 || p < 0 {
			continue
		}
		out = append(out, nccltuner.Line{Func: f, MinBytes: e.MinBytes, MaxBytes: e.MaxBytes, Algo: a, Proto: p, Channels: e.Channels,
			NNodes: e.NNodes, NRanks: e.NRanks, NumPipeOps: e.NumPipeOps, RegBuff: e.RegBuff, Chunk: e.Chunk})
	}
	return out
}

// ReadFile reads the tuner file at path in v's vocabulary (ReadFor), a
// signal (ctx's end) stopping a wait on a named pipe; a file it cannot
// read is named as --check's.
func ReadFile(ctx context.Context, path string, v Vocabulary) ([]Entry, error) {
	fh, release, err := bounded.Open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("--check %s: %w", path, err)
	}
	defer release()
	data, err := bounded.Read(fh, path, bounded.Config)
	if err != nil {
		return nil, fmt.Errorf("--check %s: %w", path, err)
	}
	return ReadFor(strings.NewReader(string(data)), path, v)
}

// ForRanks says why a file's lines cannot apply on a world of n ranks:
// every line names another rank count (a file made on another machine);
// nil where a line may apply, or where there are no lines.
func ForRanks(es []Entry, path string, n int) error {
	var counts []string
	for _, e := range es {
		if e.NRanks < 0 || e.NRanks == n {
			return nil
		}
		if c := strconv.Itoa(e.NRanks); !slices.Contains(counts, c) {
			counts = append(counts, c)
		}
	}
	if len(counts) == 0 {
		return nil
	}
	return fmt.Errorf("--check %s: its lines are for %s ranks and this world has %d: make the file on %d ranks (collbench tune --tuner-file), or check it on as many as it names",
		path, strings.Join(counts, " or "), n, n)
}
