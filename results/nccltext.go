package results

import (
	"bufio"
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The text output of NCCL's benchmark: comment lines that start with '#'
// (the version, the collective, the settings, one line per rank's device
// and the column header), then one line per size. Older versions name the
// columns differently (bytes/N/op/res, no root column, an error column
// instead of #wrong) and print no version or collective line.
var (
	ntVersionRE = regexp.MustCompile(`nccl-tests version (\S+)(?:.*nccl-library=(\d+))?`)
	ntStartRE   = regexp.MustCompile(`Collective test starting: (\S+)`)
	ntThreadsRE = regexp.MustCompile(`nThread (\d+) nGpus (\d+)`)
	ntItersRE   = regexp.MustCompile(`warmup iters: (\d+) iters: (\d+)(?: agg iters: (\d+))?`)
	ntCheckRE   = regexp.MustCompile(`validation: (\d+)`)
	ntGraphRE   = regexp.MustCompile(`graph: (\d+)`)
	ntRankRE    = regexp.MustCompile(`^Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[([^\]]*)\]\s*(.*)$`)
)

// looksLikeNCCLTestsText reports whether data holds a table of NCCL's
// benchmark: a '#' header line naming size (or bytes), time and busbw.
func looksLikeNCCLTestsText(data []byte) bool {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		if ntHeader(strings.TrimSpace(sc.Text())) != nil {
			return true
		}
	}
	return false
}

// ntHeader returns the column names of a table header line, or nil.
func ntHeader(line string) []string {
	if !strings.HasPrefix(line, "#") {
		return nil
	}
	cols := strings.Fields(strings.TrimPrefix(line, "#"))
	if (slices.Contains(cols, "size") || slices.Contains(cols, "bytes")) && slices.Contains(cols, "time") && slices.Contains(cols, "busbw") {
		return cols
	}
	return nil
}

// ntColumns is where each value stands in a data line.
type ntColumns struct {
	size, count, dtype, op, root int
	halves                       []ntHalfCols // out-of-place, then in-place
	n                            int
}

type ntHalfCols struct{ time, algbw, busbw, wrong int }

func ntLayout(cols []string) ntColumns {
	c := ntColumns{size: -1, count: -1, dtype: -1, op: -1, root: -1, n: len(cols)}
	for i, name := range cols {
		switch name {
		case "size", "bytes":
			c.size = i
		case "count", "N":
			c.count = i
		case "type":
			c.dtype = i
		case "redop", "op":
			c.op = i
		case "root":
			c.root = i
		case "time":
			h := ntHalfCols{time: i, algbw: -1, busbw: -1, wrong: -1}
			for j := i + 1; j < len(cols) && j <= i+3; j++ {
				switch cols[j] {
				case "algbw":
					h.algbw = j
				case "busbw":
					h.busbw = j
				case "#wrong":
					h.wrong = j
				}
			}
			c.halves = append(c.halves, h)
		}
	}
	return c
}

// fill restores a blank operation column: NCCL's benchmark leaves it
// empty for collectives that reduce nothing (hypercube_perf prints
// "float              -1"), so such a line has one field fewer than its
// header, and a number (the root) where the operation stands.
func (c ntColumns) fill(f []string) []string {
	if c.op < 0 || len(f) != c.n-1 || c.op >= len(f) {
		return f
	}
	if _, err := strconv.Atoi(f[c.op]); err != nil {
		return f
	}
	return slices.Insert(f, c.op, "none")
}

// ntSample is one measured line: a row's key parts and its two halves.
type ntSample struct {
	row   Row
	order int
	halfs [2][]*Half
}

// readNCCLTestsText converts the text output of NCCL's benchmark to a
// result document. name is the file's name: old versions print no
// collective, so all_reduce_perf.log tells it. A size measured more than
// once (-N, or the same program run again into one log) becomes a row of
// several cycles, its median time and its spread.
func readNCCLTestsText(data []byte, name string) (*Document, error) {
	d := &Document{Schema: Schema, SchemaVersion: SchemaVersion, Tool: Tool{Name: "nccl-tests", Version: "text"}}
	d.Config.Mode, d.Config.Average, d.Config.Backend, d.Config.Root = "both", "mean", "nccl", "0"
	base := strings.TrimSuffix(filepath.Base(name), filepath.Ext(name))
	coll := ncclTestsCollective(base)
	st := &ntState{d: d, coll: coll, ranks: map[int]bool{}}
	var (
		samples    = map[string]*ntSample{}
		keys       []string
		lineNo     int
		dataLines  int
		unnamedRow int
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") {
			st.header(line)
			continue
		}
		if st.layout == nil || line == "" || line[0] < '0' || line[0] > '9' {
			continue // NCCL's own log lines, MPI's, blank lines
		}
		f := st.layout.fill(strings.Fields(line))
		if len(f) < st.layout.n || st.layout.size < 0 {
			d.Unread = append(d.Unread, lineNo)
			continue
		}
		size, err := strconv.ParseInt(f[st.layout.size], 10, 64)
		if err != nil {
			d.Unread = append(d.Unread, lineNo)
			continue
		}
		dataLines++
		if st.coll == "" {
			unnamedRow = lineNo
			continue
		}
		row := Row{Collective: st.coll, SizeBytes: size, Op: "none", Root: -1}
		if st.layout.count >= 0 {
			row.Count, _ = strconv.ParseInt(f[st.layout.count], 10, 64)
		}
		if st.layout.dtype >= 0 {
			row.DType = f[st.layout.dtype]
		}
		if st.layout.op >= 0 && reduces(st.coll) {
			row.Op = f[st.layout.op] // older versions print one for every collective
		}
		if st.layout.root >= 0 {
			if r, err := strconv.Atoi(f[st.layout.root]); err == nil {
				row.Root = r
			}
		}
		key := fmt.Sprintf("%s|%s|%s|%d|%d", row.Collective, row.DType, row.Op, row.Root, row.SizeBytes)
		s, ok := samples[key]
		if !ok {
			s = &ntSample{row: row, order: len(keys)}
			samples[key] = s
			keys = append(keys, key)
		}
		read, bad := 0, false
		for i, hc := range st.layout.halves {
			if i > 1 {
				break
			}
			if h := ntHalf(f, hc); h != nil {
				s.halfs[i] = append(s.halfs[i], h)
				read++
			} else if hc.time >= 0 && hc.time < len(f) && f[hc.time] != "N/A" {
				bad = true // a time that is no number ("abc"): said, not dropped silently
			}
		}
		if read == 0 || bad {
			d.Unread = append(d.Unread, lineNo)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading NCCL benchmark text output: line %d: %v", lineNo+1, err)
	}
	if unnamedRow > 0 && len(keys) == 0 {
		return nil, fmt.Errorf("NCCL benchmark text output without a \"# Collective test starting:\" line (versions before 2.13): name the file after the benchmark, e.g. all_reduce_perf.log, so the collective is known")
	}
	if dataLines == 0 {
		return nil, fmt.Errorf("NCCL benchmark text output with a header but no measured line")
	}
	d.Config.Ranks = len(st.ranks)
	if d.Config.Ranks == 0 {
		d.Config.Ranks = max(st.threads*st.gpus, 1)
	}
	sort.Slice(keys, func(a, b int) bool { return samples[keys[a]].order < samples[keys[b]].order })
	seen := map[string]bool{}
	for _, k := range keys {
		s := samples[k]
		r := s.row
		r.Ranks = d.Config.Ranks
		r.OutOfPlace, r.InPlace = cycleHalf(s.halfs[0]), cycleHalf(s.halfs[1])
		if r.OutOfPlace == nil && r.InPlace == nil {
			continue
		}
		for _, h := range r.Halves() {
			if h.Cycles != nil {
				d.Config.Cycles = max(d.Config.Cycles, h.Cycles.N)
			}
		}
		d.Results = append(d.Results, r)
		if !seen[r.Collective] {
			seen[r.Collective] = true
			d.Config.Collectives = append(d.Config.Collectives, r.Collective)
		}
	}
	d.Summary = Summarize(d.Results, false)
	return d, nil
}

// ntState is what the header lines of NCCL's benchmark text output said so
// far: the collective, the table's columns, the threads and GPUs, and the
// ranks seen.
type ntState struct {
	d             *Document
	coll          string
	layout        *ntColumns
	threads, gpus int
	ranks         map[int]bool
}

// header reads one "#" line: the version, the collective, the threads and
// GPUs, the iterations, a rank's device, or the table's header.
func (st *ntState) header(line string) {
	body := strings.TrimSpace(strings.TrimPrefix(line, "#"))
	if m := ntVersionRE.FindStringSubmatch(body); m != nil {
		st.d.Tool.Version = "text " + m[1]
		if code, err := strconv.Atoi(m[2]); err == nil && code > 0 {
			st.d.Environment.Backend = Backend{Name: "nccl", VersionCode: code, Version: fmt.Sprintf("%d.%d.%d", code/10000, code%10000/100, code%100)}
		}
	}
	if m := ntStartRE.FindStringSubmatch(body); m != nil {
		if c := ncclTestsCollective(m[1]); c != "" {
			st.coll = c
		}
	}
	if m := ntThreadsRE.FindStringSubmatch(body); m != nil {
		st.threads, _ = strconv.Atoi(m[1])
		st.gpus, _ = strconv.Atoi(m[2])
	}
	if m := ntItersRE.FindStringSubmatch(body); m != nil {
		st.d.Config.Warmup, _ = strconv.Atoi(m[1])
		st.d.Config.Iters, _ = strconv.Atoi(m[2])
		if m[3] != "" {
			st.d.Config.Agg, _ = strconv.Atoi(m[3])
		}
		if m := ntCheckRE.FindStringSubmatch(body); m != nil {
			st.d.Config.Check, _ = strconv.Atoi(m[1])
		}
		if m := ntGraphRE.FindStringSubmatch(body); m != nil {
			st.d.Config.CUDAGraph, _ = strconv.Atoi(m[1])
		}
	}
	if m := ntRankRE.FindStringSubmatch(body); m != nil {
		r, _ := strconv.Atoi(m[1])
		if !st.ranks[r] {
			st.ranks[r] = true
			st.d.Environment.Backend.Devices = append(st.d.Environment.Backend.Devices, Device{Rank: r, Name: strings.TrimSpace(m[4]), BusID: m[3]})
			if st.d.Environment.Host == "" {
				st.d.Environment.Host = m[2]
			}
		}
	}
	if cols := ntHeader(line); cols != nil {
		l := ntLayout(cols)
		st.layout = &l
	}
}

// reduces says whether a collective of this name has a reduction op.
func reduces(coll string) bool {
	switch coll {
	case "allreduce", "reduce", "reduce-scatter":
		return true
	}
	return false
}

// ntHalf reads one half's values; nil where the line has none (N/A).
func ntHalf(f []string, hc ntHalfCols) *Half {
	num := func(i int) (float64, bool) {
		if i < 0 || i >= len(f) {
			return 0, false
		}
		v, err := strconv.ParseFloat(f[i], 64)
		return v, err == nil
	}
	t, ok := num(hc.time)
	if !ok {
		return nil
	}
	h := &Half{TimeUS: t}
	h.AlgBW, _ = num(hc.algbw)
	h.BusBW, _ = num(hc.busbw)
	if hc.wrong >= 0 && hc.wrong < len(f) {
		if w, err := strconv.ParseInt(f[hc.wrong], 10, 64); err == nil {
			h.Wrong = &w
		}
	}
	return h
}

// cycleHalf is one measurement, or the median of several with their
// spread kept as cycles.
func cycleHalf(hs []*Half) *Half {
	switch len(hs) {
	case 0:
		return nil
	case 1:
		return hs[0]
	}
	byTime := slices.Clone(hs)
	sort.Slice(byTime, func(a, b int) bool { return byTime[a].TimeUS < byTime[b].TimeUS })
	mid := *byTime[(len(byTime)-1)/2]
	c := &CycleStats{N: len(hs), TimeMinUS: byTime[0].TimeUS, TimeMaxUS: byTime[len(byTime)-1].TimeUS,
		BusBWMin: byTime[len(byTime)-1].BusBW, BusBWMax: byTime[0].BusBW}
	var wrong int64
	checked := false
	for _, h := range hs {
		c.TimesUS = append(c.TimesUS, h.TimeUS)
		c.BusBWMin = min(c.BusBWMin, h.BusBW)
		c.BusBWMax = max(c.BusBWMax, h.BusBW)
		if h.Wrong != nil {
			checked = true
			wrong += *h.Wrong
		}
	}
	mid.Cycles = c
	mid.Wrong = nil
	if checked {
		mid.Wrong = &wrong
	}
	return &mid
}
