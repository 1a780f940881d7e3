package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/doctor/internal/rules"
	"collbench/internal/atomicfile"
	"collbench/internal/words"
)

// HistorySchema is the version of a node history record; a record of a
// newer version is refused, never rewritten.
const HistorySchema = 1

// HistoryKind names a node history record.
const HistoryKind = "collbench/node-history"

// HistoryRules say how a node's figures are judged against its own past:
// a figure more than Drop below the median of its last Runs runs is a
// finding, and so is an error counter that grows more than Faster times
// its highest past rate per GB.
type HistoryRules struct {
	Drop   float64 `json:"drop" yaml:"drop"`
	Runs   int     `json:"runs" yaml:"runs"`
	Faster float64 `json:"faster" yaml:"faster"`
}

// DefaultHistoryRules: 15 % below the median of the last five runs (a
// healthy GPU's copy and a healthy pair's bandwidth repeat within a few
// percent from run to run on one node), and counters twice as fast as ever.
var DefaultHistoryRules = HistoryRules{Drop: 0.15, Runs: 5, Faster: 2}

// Validate checks the rules; zero fields take the defaults.
func (h HistoryRules) Validate() error {
	switch {
	case h.Drop < 0 || h.Drop >= 1 || math.IsNaN(h.Drop):
		return fmt.Errorf("history: drop %v must be between 0 and 1 (e.g. 0.15), or 0 for the default", h.Drop)
	case h.Runs < 0:
		return fmt.Errorf("history: runs %d must be 1 or more, or 0 for the default", h.Runs)
	case h.Faster < 0 || (h.Faster > 0 && h.Faster < 1) || math.IsNaN(h.Faster):
		return fmt.Errorf("history: faster %v must be 1 or more (e.g. 2), or 0 for the default", h.Faster)
	}
	return nil
}

func (h HistoryRules) withDefaults() HistoryRules {
	if h.Drop == 0 {
		h.Drop = DefaultHistoryRules.Drop
	}
	if h.Runs == 0 {
		h.Runs = DefaultHistoryRules.Runs
	}
	if h.Faster == 0 {
		h.Faster = DefaultHistoryRules.Faster
	}
	return h
}

// NodeRecord is one node's figures from one doctor run, kept under the
// node's topology fingerprint.
type NodeRecord struct {
	Kind        string    `json:"kind"`
	Schema      int       `json:"schema"`
	Version     string    `json:"collbench_version,omitempty"`
	Host        string    `json:"host"`
	Fingerprint string    `json:"fingerprint"`
	Time        time.Time `json:"time"`
	Mode        string    `json:"mode"`
	Healthy     bool      `json:"healthy"`
	// Figures are the node's measured figures by part and metric, e.g.
	// {"GPU 0000:2a:00.0", "copy GB/s"}.
	Figures []NodeFigure `json:"figures"`
	// Counters are the error counters that grew, summed over the stages.
	Counters []NodeCounter `json:"counters,omitempty"`
}

// NodeFigure is one figure of a node.
type NodeFigure struct {
	Part   string  `json:"part"`
	Metric string  `json:"metric"`
	Value  float64 `json:"value"`
}

// NodeCounter is one error counter's growth over a run, with the traffic
// over its part.
type NodeCounter struct {
	Part    string  `json:"part"`
	Counter string  `json:"counter"`
	Growth  uint64  `json:"growth"`
	GB      float64 `json:"gb"`
}

// PerGB is the counter's growth per GB of traffic (0 without traffic).
func (c NodeCounter) PerGB() float64 {
	if c.GB > 0 {
		return float64(c.Growth) / c.GB
	}
	return 0
}

// NodeRecords are the report's figures per host, one record each, at t.
func NodeRecords(r *record.Report, t time.Time, version string) []NodeRecord {
	byHost := map[string]facts.HostFacts{}
	for _, f := range r.Facts {
		byHost[f.Host] = f
	}
	name := map[int]string{} // rank -> its part's name on its host
	var out []NodeRecord
	for _, h := range r.Hosts {
		rec := NodeRecord{Kind: HistoryKind, Schema: HistorySchema, Version: version, Host: h, Time: t.UTC(), Mode: r.Mode, Healthy: r.Healthy}
		f, ok := byHost[h]
		if ok && len(f.GPUs) > 0 {
			rec.Fingerprint = f.Fingerprint()
		} else {
			// No NVML facts (the cpu backend): the devices doctor measured.
			var devs []string
			for _, g := range r.GPUs {
				if g.Host == h {
					devs = append(devs, g.Device)
				}
			}
			sum := sha256.Sum256([]byte(r.Backend + ";" + strings.Join(devs, ";")))
			rec.Fingerprint = hex.EncodeToString(sum[:6])
		}
		local := 0
		for _, g := range r.GPUs {
			if g.Host != h {
				continue
			}
			part := fmt.Sprintf("local rank %d", local)
			if g.BusID != "" {
				part = "GPU " + strings.ToLower(g.BusID)
			}
			local++
			name[g.Rank] = part
			rec.Figures = append(rec.Figures, NodeFigure{part, "copy GB/s", g.CopyGBps})
			if g.FillGelem > 0 {
				rec.Figures = append(rec.Figures, NodeFigure{part, "fill Gelem/s", g.FillGelem})
			}
		}
		for _, p := range r.Pairs {
			if p.Host != h || name[p.A] == "" || name[p.B] == "" {
				continue
			}
			part := name[p.A] + " and " + name[p.B]
			rec.Figures = append(rec.Figures, NodeFigure{part, "one way GB/s", p.OneWay()}, NodeFigure{part, "both ways GB/s", p.Both})
		}
		sums := map[[2]string]*NodeCounter{}
		var order [][2]string
		for _, c := range r.Counters {
			if c.Host != h {
				continue
			}
			k := [2]string{c.Part.Name(), c.Counter}
			if sums[k] == nil {
				sums[k] = &NodeCounter{Part: k[0], Counter: k[1]}
				order = append(order, k)
			}
			sums[k].Growth += c.Growth()
			sums[k].GB += c.GB()
		}
		for _, k := range order {
			rec.Counters = append(rec.Counters, *sums[k])
		}
		out = append(out, rec)
	}
	return out
}

// safeName makes a host name or fingerprint one path element.
func safeName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == 0 || r < ' ' {
			return '_'
		}
		return r
	}, s)
	if s == "" || s == "." || s == ".." {
		return "_" + s
	}
	return s
}

// NodeDir is where a node's records of one fingerprint live.
func NodeDir(dir, host, fp string) string {
	return filepath.Join(dir, safeName(host), safeName(fp))
}

// readRecord reads one history file and checks it belongs where it lies.
func readRecord(path, host, fp string) (NodeRecord, error) {
	var rec NodeRecord
	b, err := os.ReadFile(path) //nolint:gosec // G304: a file of the history directory the user named
	if err != nil {
		return rec, fmt.Errorf("history file %s: %v", path, err)
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.Kind != HistoryKind {
		return rec, fmt.Errorf("history file %s is not a collbench node history record; move it out of the history directory", path)
	}
	if rec.Schema > HistorySchema {
		return rec, fmt.Errorf("history file %s is of a newer collbench (record version %d, this one reads %d); use that version, or another --history directory", path, rec.Schema, HistorySchema)
	}
	if safeName(rec.Host) != host {
		return rec, fmt.Errorf("history file %s is from host %s but lies under host %s; move it back under %s", path, rec.Host, host, safeName(rec.Host))
	}
	if fp != "" && safeName(rec.Fingerprint) != fp {
		return rec, fmt.Errorf("history file %s has topology fingerprint %s but lies under %s; move it back", path, rec.Fingerprint, fp)
	}
	return rec, nil
}

// CheckHistoryDir makes sure dir can keep a history: it exists or can be
// made, can be written, and the records doctor will read (each node's
// newest runs, see HistoryRules.Runs; 0 for the default) belong where
// they lie and are of a version this collbench reads. Older records are
// never read by doctor, so a history of many runs on many hosts costs the
// same to check as one of a few runs. Nothing in it is changed.
func CheckHistoryDir(dir string, runs int) error {
	runs = HistoryRules{Runs: runs}.withDefaults().Runs
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // G301: a history for others to read, as reports are
		return fmt.Errorf("--history %s: %v; give a directory this user can write", dir, err)
	}
	// Asked, not tried: a probe file would change the directory.
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("--history %s is not writable (%v); give a directory this user can write", dir, err)
	}
	nodes, err := filepath.Glob(filepath.Join(dir, "*", "*"))
	if err != nil {
		return fmt.Errorf("--history %s: %v", dir, err)
	}
	for _, d := range nodes {
		host, fp := filepath.Base(filepath.Dir(d)), filepath.Base(d)
		for _, f := range NewestFiles(d, runs) {
			if _, err := readRecord(f, host, fp); err != nil {
				return err
			}
		}
	}
	return nil
}

// NewestFiles lists the newest k record files of one node directory,
// oldest first (k 0: all). A record's name is its run's time (UTC), with
// -2, -3... for later runs in the same second, so names sort by time.
func NewestFiles(d string, k int) []string {
	files, _ := filepath.Glob(filepath.Join(d, "*.json"))
	key := func(f string) (string, int) {
		base := strings.TrimSuffix(filepath.Base(f), ".json")
		stamp, n, ok := strings.Cut(base, "-")
		if !ok {
			return stamp, 1
		}
		i, err := strconv.Atoi(n)
		if err != nil {
			return base, 0
		}
		return stamp, i
	}
	slices.SortStableFunc(files, func(a, b string) int {
		sa, na := key(a)
		sb, nb := key(b)
		if c := strings.Compare(sa, sb); c != 0 {
			return c
		}
		return na - nb
	})
	if k > 0 && len(files) > k {
		files = files[len(files)-k:]
	}
	return files
}

// LoadNode reads a node's records under one fingerprint, oldest first.
func LoadNode(dir, host, fp string) ([]NodeRecord, error) { return loadNewest(dir, host, fp, 0) }

// loadNewest reads a node's newest k records under one fingerprint (k 0:
// all), oldest first.
func loadNewest(dir, host, fp string, k int) ([]NodeRecord, error) {
	files := NewestFiles(NodeDir(dir, host, fp), k)
	var out []NodeRecord
	for _, f := range files {
		rec, err := readRecord(f, safeName(host), safeName(fp))
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	slices.SortStableFunc(out, func(a, b NodeRecord) int { return a.Time.Compare(b.Time) })
	return out, nil
}

// SaveNode writes rec as a new file of its node's history, atomically,
// and returns its path; no file already there is replaced.
func SaveNode(dir string, rec NodeRecord) (string, error) {
	d := NodeDir(dir, rec.Host, rec.Fingerprint)
	if err := os.MkdirAll(d, 0o755); err != nil { //nolint:gosec // G301: a history for others to read, as reports are
		return "", fmt.Errorf("--history: %v", err)
	}
	base := rec.Time.UTC().Format("20060102T150405Z")
	path := filepath.Join(d, base+".json")
	for i := 2; ; i++ {
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			break
		}
		path = filepath.Join(d, fmt.Sprintf("%s-%d.json", base, i))
	}
	err := atomicfile.Replace(path, true, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rec)
	})
	if err != nil {
		return "", fmt.Errorf("--history: writing %s: %v", path, err)
	}
	return path, nil
}

// CompareNode judges now against past (oldest first, the same node and
// fingerprint): every figure against the median of its last runs, every
// counter's rate against its highest past rate. It returns the
// comparisons and a WARN for each that crossed the rules.
func CompareNode(now NodeRecord, past []NodeRecord, ruleSet HistoryRules) ([]record.HistoryChange, []record.Finding) {
	ruleSet = ruleSet.withDefaults()
	if len(past) > ruleSet.Runs {
		past = past[len(past)-ruleSet.Runs:]
	}
	if len(past) == 0 {
		return nil, nil
	}
	var changes []record.HistoryChange
	var out []record.Finding
	for _, f := range now.Figures {
		var vals []float64
		since := ""
		for _, p := range past {
			for _, pf := range p.Figures {
				if pf.Part == f.Part && pf.Metric == f.Metric && pf.Value > 0 {
					vals = append(vals, pf.Value)
					if since == "" {
						since = p.Time.Format(time.RFC3339)
					}
				}
			}
		}
		if len(vals) == 0 {
			continue
		}
		c := record.HistoryChange{Host: now.Host, Part: f.Part, Metric: f.Metric, Now: f.Value, Baseline: facts.Median(vals), Runs: len(vals), Since: since}
		if c.Baseline > 0 && f.Value < (1-ruleSet.Drop)*c.Baseline {
			c.Flagged = true
			out = append(out, record.Finding{Severity: "WARN", Stage: "history", Kind: "fell-since-past", Part: now.Host + " " + f.Part, Host: now.Host,
				Value: f.Value, Peers: c.Baseline, Msg: fmt.Sprintf("%s %s, %.0f%% below its own median of %s over its last %d run(s) since %s",
					f.Metric, facts.GB(f.Value), (1-f.Value/c.Baseline)*100, facts.GB(c.Baseline), c.Runs, since[:10]),
				Cause: "the same node measured better before: a part that is wearing, a setting or driver that changed, or another workload now"})
		}
		changes = append(changes, c)
	}
	for _, nc := range now.Counters {
		top, runs := 0.0, 0
		since := ""
		for _, p := range past {
			runs++
			if since == "" {
				since = p.Time.Format(time.RFC3339)
			}
			for _, pc := range p.Counters {
				if pc.Part == nc.Part && pc.Counter == nc.Counter {
					top = max(top, pc.PerGB())
				}
			}
		}
		c := record.HistoryChange{Host: now.Host, Part: nc.Part, Metric: nc.Counter + " per GB", Now: nc.PerGB(), Baseline: top, Runs: runs, Since: since}
		if top > 0 && nc.PerGB() > ruleSet.Faster*top {
			c.Flagged = true
			out = append(out, record.Finding{Severity: "WARN", Stage: "history", Kind: "counter-faster", Part: now.Host + " " + nc.Part, Host: now.Host,
				Value: nc.PerGB(), Peers: top, Msg: fmt.Sprintf("%s grows at %.3g per GB, %.1fx its highest rate in its last %d run(s) since %s (%.3g per GB)",
					nc.Counter, nc.PerGB(), nc.PerGB()/top, runs, since[:10], top),
				Cause: "the errors grow faster than before: the part is getting worse"})
		}
		changes = append(changes, c)
	}
	return changes, out
}

// ApplyHistory compares every host of the report with its own past in dir
// and adds the comparisons and their findings to the report; a complete
// run's figures are then saved as the newest record of each host (a run
// that stopped on a fault is compared but not kept: its figures are
// partial). It returns the paths written.
func ApplyHistory(r *record.Report, dir string, ruleSet HistoryRules, t time.Time, version string) ([]string, error) {
	if facts.HostMemory(r.Backend) && ruleSet.Drop == 0 {
		// A host-memory backend's ranks share a host's cores: its figures vary
		// from run to run as much as between peers.
		ruleSet.Drop = rules.RulesFor(r.Backend).Drop
	}
	runs := ruleSet.withDefaults().Runs
	var written []string
	var fresh []string // hosts with no past runs
	compared, fewest, most := 0, runs, 0
	for _, rec := range NodeRecords(r, t, version) {
		past, err := loadNewest(dir, rec.Host, rec.Fingerprint, runs)
		if err != nil {
			return written, err
		}
		changes, fs := CompareNode(rec, past, ruleSet)
		r.History = append(r.History, changes...)
		r.Findings = append(r.Findings, fs...)
		if len(past) == 0 {
			fresh = append(fresh, rec.Host)
		} else {
			compared++
			fewest, most = min(fewest, len(past)), max(most, len(past))
		}
		if r.StoppedIn == "" {
			path, err := SaveNode(dir, rec)
			if err != nil {
				return written, err
			}
			written = append(written, path)
		}
	}
	// One note for every host: a cluster's report has no line per host.
	var parts []string
	if compared > 0 {
		each := fmt.Sprintf("%d to %d runs", fewest, most)
		switch {
		case fewest == 1 && most == 1:
			each = "1 run"
		case fewest == most:
			each = fmt.Sprintf("%d runs", most)
		}
		parts = append(parts, fmt.Sprintf("%s compared with their own past (%s each)", hostsWord(compared), each))
	}
	if len(fresh) > 0 {
		parts = append(parts, fmt.Sprintf("%s with no past runs yet (%s)", hostsWord(len(fresh)), someHosts(fresh, 3)))
	}
	note := "history in " + dir + ": " + strings.Join(parts, "; ")
	if r.StoppedIn == "" {
		note += fmt.Sprintf("; this run kept for each (%s)", words.Count(len(written)))
	} else {
		note += "; not kept: the run stopped in " + r.StoppedIn
	}
	r.Notes = append(r.Notes, note)
	record.SortFindings(r.Findings)
	return written, nil
}

// someHosts names the first k hosts, and how many more.
func someHosts(hs []string, k int) string {
	if len(hs) <= k {
		return strings.Join(hs, ", ")
	}
	return strings.Join(hs[:k], ", ") + fmt.Sprintf(" and %s more", words.Count(len(hs)-k))
}

// hostsWord is "1 host" or "1,024 hosts".
func hostsWord(n int) string {
	if n == 1 {
		return "1 host"
	}
	return words.Count(n) + " hosts"
}
