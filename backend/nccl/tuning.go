package nccl

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"collbench/measure"
	"collbench/results"
)

// NCCL writes the algorithm and protocol it chose for each collective to
// its log (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=TUNING), on the
// communicator's rank 0 only. The line changed over the versions:
//
//	2.18, 2.19   nothing at INFO level (only TRACE, in debug builds)
//	2.20–2.22    "<bytes> Bytes -> Algo <id> proto <id> time <µs>"
//	2.23         "<Func>: <bytes> Bytes -> Algo <id> proto <id> time <µs>"
//	2.24+        "<Func>: <bytes> Bytes -> Algo <NAME> proto <NAME> channel{Lo..Hi}={<lo>..<hi>}"
//	2.27+        also "<Func> [Symmetric]: <bytes> Bytes -> Kernel <name> nchannels <n> nthreads <n>[ nWorks <n>]"
//	             for buffers registered as symmetric windows
//
// Each line follows "[<cuda device>] NCCL INFO " in the log.

// TuningDecision is one collective as NCCL's tuning log records it.
type TuningDecision struct {
	Device int    // the CUDA device of the thread that issued it
	Func   string // AllReduce, Broadcast, ...; "" before 2.23
	Bytes  int64
	Algo   string // RING, TREE, ...; for symmetric kernels the kernel's name
	Proto  string // LL, LL128, SIMPLE; "" for symmetric kernels
	// ChannelLo and ChannelHi are the channels it ran on (2.24+), -1 if
	// the line does not say; Channels counts them (nchannels for symmetric
	// kernels).
	ChannelLo, ChannelHi int
	Channels             int
	Symmetric            bool
	// ModelUS is NCCL's predicted time, in µs (2.20–2.23), 0 if not given.
	ModelUS float64
}

// Choice converts the decision to a result row's algorithm.
func (d TuningDecision) Choice() *results.AlgoChoice {
	a := &results.AlgoChoice{Algo: d.Algo, Proto: d.Proto, Source: "NCCL tuning log"}
	switch {
	case d.Symmetric:
		// NCCL 2.27+'s kernels for symmetric windows replace the algorithm
		// and protocol; the kernel's name says both.
		a.Algo, a.Proto = "SYMMETRIC", d.Algo
		if d.Channels > 0 {
			a.Channels = strconv.Itoa(d.Channels)
		}
	case d.ChannelLo >= 0 && d.ChannelHi >= d.ChannelLo:
		a.Channels = fmt.Sprintf("%d..%d", d.ChannelLo, d.ChannelHi)
	}
	return a
}

// algoIDs and protoIDs are NCCL's numbering of algorithms and protocols,
// which the logs of 2.20–2.23 print.
var (
	algoIDs  = []string{"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"}
	protoIDs = []string{"LL", "LL128", "SIMPLE"}
)

func nameOf(ids []string, s string) string {
	if i, err := strconv.Atoi(s); err == nil {
		if i >= 0 && i < len(ids) {
			return ids[i]
		}
		return "#" + s
	}
	return strings.ToUpper(s)
}

var (
	infoPrefix = regexp.MustCompile(`\[(\d+)\] NCCL INFO (.*)$`)
	// named: 2.23+ (Algo as a number in 2.23, as a name from 2.24).
	namedLine = regexp.MustCompile(`^(\w+): (\d+) Bytes -> Algo (\w+) proto (\w+)(?: channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\})?(?: time (-?[0-9.]+))?\s*$`)
	// bare: 2.20–2.22.
	bareLine = regexp.MustCompile(`^(\d+) Bytes -> Algo (\w+) proto (\w+) time (-?[0-9.]+)\s*$`)
	// symmetric: 2.27+.
	symLine = regexp.MustCompile(`^(\w+) \[Symmetric\]: (\d+) Bytes -> Kernel (\S+) nchannels (\d+)`)
)

// ParseTuningLog reads every tuning decision in an NCCL log, in order.
// Other lines are skipped.
func ParseTuningLog(r io.Reader) ([]TuningDecision, error) {
	var out []TuningDecision
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := infoPrefix.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		dev, _ := strconv.Atoi(m[1])
		msg := strings.TrimSpace(m[2])
		d := TuningDecision{Device: dev, ChannelLo: -1, ChannelHi: -1}
		if s := symLine.FindStringSubmatch(msg); s != nil {
			d.Func, d.Symmetric, d.Algo = s[1], true, s[3]
			d.Bytes, _ = strconv.ParseInt(s[2], 10, 64)
			d.Channels, _ = strconv.Atoi(s[4])
			out = append(out, d)
			continue
		}
		if s := namedLine.FindStringSubmatch(msg); s != nil {
			d.Func = s[1]
			d.Bytes, _ = strconv.ParseInt(s[2], 10, 64)
			d.Algo, d.Proto = nameOf(algoIDs, s[3]), nameOf(protoIDs, s[4])
			if s[5] != "" {
				d.ChannelLo, _ = strconv.Atoi(s[5])
				d.ChannelHi, _ = strconv.Atoi(s[6])
				d.Channels = d.ChannelHi - d.ChannelLo + 1
			}
			if s[7] != "" {
				d.ModelUS, _ = strconv.ParseFloat(s[7], 64)
			}
			out = append(out, d)
			continue
		}
		if s := bareLine.FindStringSubmatch(msg); s != nil {
			d.Bytes, _ = strconv.ParseInt(s[1], 10, 64)
			d.Algo, d.Proto = nameOf(algoIDs, s[2]), nameOf(protoIDs, s[3])
			d.ModelUS, _ = strconv.ParseFloat(s[4], 64)
			out = append(out, d)
		}
	}
	return out, sc.Err()
}

// TuningLogUsable says whether NCCL version code writes its choices at
// INFO level, and if not, why.
func TuningLogUsable(code int) (bool, string) {
	if !AtLeast(code, 2, 20, 0) {
		return false, fmt.Sprintf("NCCL %s writes its algorithm choices only at TRACE level, which release builds leave out (2.20 or newer logs them)", FormatVersion(code))
	}
	return true, ""
}

// LogsChoice reports whether NCCL picks an algorithm for c, and so logs
// it: the collectives it builds from sends and receives (alltoall,
// gather, scatter and the rest) have no algorithm or protocol choice.
func LogsChoice(c measure.Collective) bool {
	switch c {
	case measure.AllReduce, measure.AllGather, measure.ReduceScatter, measure.Broadcast, measure.Reduce:
		return true
	}
	return false
}

// P2PChoice is the algorithm of a collective NCCL builds from sends and
// receives: no algorithm or protocol is chosen, whatever the size.
func P2PChoice() *results.AlgoChoice {
	return &results.AlgoChoice{Algo: "P2P", Source: "NCCL runs it as sends and receives: no algorithm or protocol choice"}
}

// funcName is how NCCL's log names a collective.
func funcName(c measure.Collective) string {
	switch c {
	case measure.AllReduce:
		return "AllReduce"
	case measure.AllGather:
		return "AllGather"
	case measure.ReduceScatter:
		return "ReduceScatter"
	case measure.Broadcast:
		return "Broadcast"
	case measure.Reduce:
		return "Reduce"
	}
	return ""
}

// ExpectedCall is one collective a communicator's rank 0 issued, in
// order, which its tuning log should record.
type ExpectedCall struct {
	Coll measure.Collective
	// Key identifies what the decision explains (the caller's row index).
	Key int
}

// MatchTuning pairs a communicator's decisions (its rank 0's lines, in
// order) with the calls it issued. When the counts agree the two are
// zipped, checking the function names where the log has them; otherwise,
// with names, each call takes the next line of its function. It returns
// the decision for each key (the first one, where a key had several calls)
// or an error saying why the log cannot be matched.
func MatchTuning(calls []ExpectedCall, lines []TuningDecision) (map[int]TuningDecision, error) {
	out := map[int]TuningDecision{}
	take := func(k int, d TuningDecision) {
		if _, ok := out[k]; !ok {
			out[k] = d
		}
	}
	named := len(lines) > 0 && lines[0].Func != ""
	if len(lines) == len(calls) {
		ok := true
		for i, c := range calls {
			if named && !strings.EqualFold(lines[i].Func, funcName(c.Coll)) {
				ok = false
				break
			}
		}
		if ok {
			for i, c := range calls {
				take(c.Key, lines[i])
			}
			return out, nil
		}
	}
	if !named {
		return nil, fmt.Errorf("the log has %d tuning lines for %d calls and does not name their functions", len(lines), len(calls))
	}
	j := 0
	for _, c := range calls {
		for j < len(lines) && !strings.EqualFold(lines[j].Func, funcName(c.Coll)) {
			j++
		}
		if j == len(lines) {
			return nil, fmt.Errorf("the log has no %s line for call %d of %d", funcName(c.Coll), len(out)+1, len(calls))
		}
		take(c.Key, lines[j])
		j++
	}
	return out, nil
}
