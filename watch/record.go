package watch

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// RecordSchema names the JSON document collbench watch writes (-o).
const RecordSchema = "collbench/watch"

// MaxRecorded bounds the findings a Record keeps: a watch that runs for
// weeks on a flapping rank keeps the newest and counts the rest.
const MaxRecorded = 1000

// Record is what collbench watch has seen: every finding in the order it
// came (the newest MaxRecorded), and those that stand now. It is written
// whole after each finding, so the file on disk is always a valid
// document of everything seen so far.
type Record struct {
	Schema   string            `json:"schema"`
	Started  time.Time         `json:"started"`
	Updated  time.Time         `json:"updated"`
	Findings []RecordedFinding `json:"findings"`
	LeftOut  int               `json:"findings_left_out,omitempty"`
	Standing []RecordedFinding `json:"standing"`
	Total    int               `json:"findings_total"`
	// Counts is what the collector had taken in at Updated.
	Counts Counts `json:"counts"`
}

// RecordedFinding is one finding as written: when it came, its line, and
// the doctor command that would confirm it on the drained node.
type RecordedFinding struct {
	At         time.Time `json:"at"`
	Comm       string    `json:"communicator"`
	Rank       int       `json:"rank"`
	Host       string    `json:"host"`
	GPU        string    `json:"gpu,omitempty"`
	Cause      string    `json:"cause,omitempty"`
	LateUS     float64   `json:"late_us,omitempty"`
	Late       int       `json:"late_ops,omitempty"`
	Of         int       `json:"of_ops,omitempty"`
	Func       string    `json:"func,omitempty"`
	SinceSeq   uint64    `json:"since_op"`
	Cleared    bool      `json:"cleared,omitempty"`
	ClearedSeq uint64    `json:"cleared_op,omitempty"`
	Line       string    `json:"line"`
	Confirm    string    `json:"confirm,omitempty"`
	// Link is set for a slow link from Rank.
	Link *RecordedLink `json:"link,omitempty"`
	// Dropped and Missed: the rank's summaries dropped, and operations
	// left unjudged without its summary, when it was named.
	Dropped int64 `json:"summaries_dropped,omitempty"`
	Missed  int64 `json:"operations_missed,omitempty"`
	// SharesGPU are the communicator's ranks on the same GPU as this one,
	// whose GPU started late.
	SharesGPU []int `json:"shares_gpu_with,omitempty"`
	// NVLink is set for a GPU whose NVLinks carry traffic that is not
	// the job's.
	NVLink *RecordedNVLink `json:"nvlink,omitempty"`
}

// RecordedNVLink is that GPU's part of a recorded finding, in bytes per
// second: beyond the job's bound out and in, what its links counted and
// the job's bound, and the GPUs of its host at the other end.
type RecordedNVLink struct {
	OutBps     float64  `json:"beyond_job_out_bytes_per_s"`
	InBps      float64  `json:"beyond_job_in_bytes_per_s"`
	CountedBps float64  `json:"counted_bytes_per_s,omitempty"`
	JobBps     float64  `json:"job_bound_bytes_per_s,omitempty"`
	Peers      []string `json:"peer_gpus,omitempty"`
}

// RecordedLink is a slow link's part of a recorded finding: the peer it
// sends to (-1: every link to and from the rank), its median rate over
// its slow operations and the median link's in them, in bytes per second.
type RecordedLink struct {
	Peer      int     `json:"peer"`
	PeerHost  string  `json:"peer_host,omitempty"`
	PeerGPU   string  `json:"peer_gpu,omitempty"`
	Rate      float64 `json:"rate_bytes_per_s,omitempty"`
	MedianBps float64 `json:"median_link_bytes_per_s,omitempty"`
}

// NewRecord starts an empty record at t.
func NewRecord(t time.Time) *Record {
	return &Record{Schema: RecordSchema, Started: t, Updated: t, Findings: []RecordedFinding{}, Standing: []RecordedFinding{}}
}

// Confirm is the doctor command that would confirm f on its node once the
// job has left it: doctor times each GPU alone and every path from it, so a
// GPU that starts late, or a host that issues late, shows without the job.
func (f Finding) Confirm() string {
	if f.Cleared {
		return ""
	}
	if f.Link != nil && f.Link.Peer >= 0 {
		return f.linkConfirm()
	}
	if f.NVLink != nil {
		return f.nvlinkConfirm()
	}
	if len(f.SharesGPU) > 0 {
		// The GPU is not the fault: the job's placement is.
		return fmt.Sprintf("on %s, give rank %d and %s GPUs of their own (they share GPU %s), then watch again", f.Host, f.Rank, rankWords(f.SharesGPU), f.GPU)
	}
	what := "its GPUs alone, in pairs and across hosts"
	if f.GPU != "" {
		what = "GPU " + f.GPU + " alone, in pairs and across hosts"
	}
	return fmt.Sprintf("on %s, once drained: collbench doctor -o doctor-%s.json (times %s)", f.Host, f.Host, what)
}

func recorded(f Finding, at time.Time) RecordedFinding {
	r := RecordedFinding{At: at, Comm: fmt.Sprintf("%016x", f.Comm), Rank: f.Rank, Host: f.Host, GPU: f.GPU,
		SinceSeq: f.SinceSeq, Cleared: f.Cleared, ClearedSeq: f.ClearedSeq, Line: f.String(), Confirm: f.Confirm()}
	if !f.Cleared {
		r.Cause, r.LateUS, r.Late, r.Of, r.Func = string(f.Cause), float64(f.By)/float64(time.Microsecond), f.Late, f.Of, f.Func
		r.Dropped, r.Missed, r.SharesGPU = f.Dropped, f.Missed, f.SharesGPU
	}
	if l := f.Link; l != nil {
		r.Link = &RecordedLink{Peer: l.Peer, PeerHost: l.PeerHost, PeerGPU: l.PeerGPU}
		if !f.Cleared {
			r.Link.Rate, r.Link.MedianBps = l.Rate, l.Median
		}
	}
	if v := f.NVLink; v != nil {
		r.NVLink = &RecordedNVLink{Peers: v.Peers}
		if !f.Cleared {
			r.NVLink.OutBps, r.NVLink.InBps, r.NVLink.CountedBps, r.NVLink.JobBps = v.OutBps, v.InBps, v.CountedBps, v.JobBps
		}
	}
	return r
}

// Add records f, seen at t: it joins the findings, and the standing ones
// take it (a rank named) or lose its rank (a rank cleared).
func (r *Record) Add(f Finding, t time.Time) {
	rf := recorded(f, t)
	r.Updated = t
	r.Total++
	r.Findings = append(r.Findings, rf)
	if n := len(r.Findings) - MaxRecorded; n > 0 {
		r.Findings = append(r.Findings[:0], r.Findings[n:]...)
		r.LeftOut += n
	}
	kept := r.Standing[:0]
	for _, s := range r.Standing {
		if s.Comm != rf.Comm || s.Rank != rf.Rank || partOf(s) != partOf(rf) {
			kept = append(kept, s)
		}
	}
	r.Standing = kept
	if !f.Cleared {
		r.Standing = append(r.Standing, rf)
	}
}

// partOf is the part a recorded finding names beside its rank: the peer
// of a link (-1: all the rank's links), -2 for the rank itself, -3 for
// its GPU's NVLinks.
func partOf(r RecordedFinding) int {
	switch {
	case r.NVLink != nil:
		return -3
	case r.Link == nil:
		return -2
	}
	return r.Link.Peer
}

// promPeer is a link's peer as a label: its rank, or "all" for every
// link to and from the rank.
func promPeer(peer int) string {
	if peer < 0 {
		return "all"
	}
	return fmt.Sprint(peer)
}

// SetStanding replaces the standing findings with the collector's own
// account at t (at the end of a watch).
func (r *Record) SetStanding(fs []Finding, t time.Time) {
	r.Updated = t
	r.Standing = r.Standing[:0]
	for _, f := range fs {
		r.Standing = append(r.Standing, recorded(f, t))
	}
}

// SetCounts records what the collector has taken in, at t.
func (r *Record) SetCounts(c Counts, t time.Time) {
	r.Counts, r.Updated = c, t
}

// String says what a collector judged, in one line.
func (c Counts) String() string {
	links, unjudged := "", ""
	if c.Links > 0 {
		links = fmt.Sprintf(" and %d link measurements", c.Links)
	} else if c.LinksIn > 0 {
		unjudged = fmt.Sprintf("; %d link measurements received, none judged: links are compared within an operation, among 3 or more that moved %d KiB or more each", c.LinksIn, MinLinkBytesDefault>>10)
	}
	behind := ""
	if len(c.Behind) > 0 && c.Behind[0].Missed > 0 {
		b := c.Behind[0]
		behind = fmt.Sprintf("; most unjudged for want of rank %d (%s) on communicator %s: %d operations", b.Rank, b.Host, b.Comm, b.Missed)
	}
	if c.Every > 1 {
		behind += fmt.Sprintf("; sampled: every %d operations at most", c.Every)
	}
	switch len(c.Libraries) {
	case 0:
	case 1:
		behind += "; every process on " + c.Libraries[0].Library
	default:
		var ls []string
		for _, l := range c.Libraries {
			unit := "processes"
			if l.Processes == 1 {
				unit = "process"
			}
			ls = append(ls, fmt.Sprintf("%s (%d %s)", l.Library, l.Processes, unit))
		}
		behind += "; libraries: " + strings.Join(ls, ", ")
	}
	if c.NVLink != nil {
		unjudged += "; " + c.NVLink.String()
	}
	return fmt.Sprintf("judged %d operations%s on %d communicators from %d processes (%d summaries received, %d dropped%s%s)",
		c.Operations, links, c.Communicators, c.Processes, c.Summaries, c.Dropped, behind, unjudged)
}

// Verdict is collbench watch's last line where no finding stands: what it
// judged, or, where that is nothing, the likeliest reason.
func (c Counts) Verdict() string {
	switch {
	case c.Processes == 0:
		return "no finding stands, but nothing was judged: no process connected (the job needs COLLBENCH_WATCH=<this host>:<port> and the same COLLBENCH_TOKEN; an NCCL application also NCCL_PROFILER_PLUGIN=$(collbench watch --plugin-path))"
	case c.Summaries == 0:
		return fmt.Sprintf("no finding stands, but nothing was judged: %d processes connected and sent no summary (did their NCCL load the plugin? NCCL_DEBUG=INFO says)", c.Processes)
	case c.Operations == 0:
		return fmt.Sprintf("no finding stands, but nothing was judged: %d summaries came, and no operation was reported by every rank of its communicator (is every process of the job sending?)", c.Summaries)
	}
	return "no finding stands; " + c.String()
}

// Tally says what fs hold: how many ranks are late, how many ranks' links
// are all slow, and how many links are slow.
func Tally(fs []Finding) string {
	var late, ends, links, gpus int
	for _, f := range fs {
		switch {
		case f.NVLink != nil:
			gpus++
		case f.Link == nil:
			late++
		case f.Link.Peer < 0:
			ends++
		default:
			links++
		}
	}
	var parts []string
	for _, p := range []struct {
		n         int
		one, many string
	}{
		{late, "1 rank is still late", "%d ranks are still late"},
		{ends, "1 rank's links are still all slow", "%d ranks' links are still all slow"},
		{links, "1 link is still slow", "%d links are still slow"},
		{gpus, "1 GPU's NVLinks still carry traffic beyond the job's NCCL operations", "%d GPUs' NVLinks still carry traffic beyond the job's NCCL operations"},
	} {
		switch {
		case p.n == 1:
			parts = append(parts, p.one)
		case p.n > 1:
			parts = append(parts, fmt.Sprintf(p.many, p.n))
		}
	}
	return strings.Join(parts, " and ")
}

// WriteJSON writes the record as one indented JSON document.
func (r *Record) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteProm writes the standing findings and the counts in the text
// format of node-exporter's textfile collector, as doctor's --prom does.
func (r *Record) WriteProm(w io.Writer) error {
	esc := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace
	var b strings.Builder
	b.WriteString("# HELP collbench_watch_late 1 for each rank collbench watch names as late now.\n")
	b.WriteString("# TYPE collbench_watch_late gauge\n")
	for _, s := range r.Standing {
		if s.Link == nil && s.NVLink == nil {
			fmt.Fprintf(&b, "collbench_watch_late{communicator=%q,rank=\"%d\",host=\"%s\",gpu=\"%s\",cause=\"%s\"} 1\n", s.Comm, s.Rank, esc(s.Host), esc(s.GPU), esc(s.Cause))
		}
	}
	b.WriteString("# HELP collbench_watch_late_seconds How late each named rank is after its peers (median).\n")
	b.WriteString("# TYPE collbench_watch_late_seconds gauge\n")
	for _, s := range r.Standing {
		if s.Link == nil && s.NVLink == nil {
			fmt.Fprintf(&b, "collbench_watch_late_seconds{communicator=%q,rank=\"%d\",host=\"%s\"} %g\n", s.Comm, s.Rank, esc(s.Host), s.LateUS/1e6)
		}
	}
	b.WriteString("# HELP collbench_watch_slow_link_bytes_per_second The send rate of each link collbench watch names as slow now (median over its slow operations).\n")
	b.WriteString("# TYPE collbench_watch_slow_link_bytes_per_second gauge\n")
	for _, s := range r.Standing {
		if l := s.Link; l != nil {
			fmt.Fprintf(&b, "collbench_watch_slow_link_bytes_per_second{communicator=%q,rank=\"%d\",peer=\"%s\",host=\"%s\",peer_host=\"%s\"} %g\n",
				s.Comm, s.Rank, promPeer(l.Peer), esc(s.Host), esc(l.PeerHost), l.Rate)
		}
	}
	b.WriteString("# HELP collbench_watch_link_median_bytes_per_second The median link's send rate in the operations where a named link was slow.\n")
	b.WriteString("# TYPE collbench_watch_link_median_bytes_per_second gauge\n")
	for _, s := range r.Standing {
		if l := s.Link; l != nil {
			fmt.Fprintf(&b, "collbench_watch_link_median_bytes_per_second{communicator=%q,rank=\"%d\",peer=\"%s\"} %g\n", s.Comm, s.Rank, promPeer(l.Peer), l.MedianBps)
		}
	}
	b.WriteString("# HELP collbench_watch_nvlink_beyond_job_bytes_per_second What each GPU named now carries over NVLink beyond the job's own bound, each way.\n")
	b.WriteString("# TYPE collbench_watch_nvlink_beyond_job_bytes_per_second gauge\n")
	for _, s := range r.Standing {
		if v := s.NVLink; v != nil {
			for _, d := range []struct {
				dir string
				bps float64
			}{{"out", v.OutBps}, {"in", v.InBps}} {
				fmt.Fprintf(&b, "collbench_watch_nvlink_beyond_job_bytes_per_second{host=\"%s\",gpu=\"%s\",direction=\"%s\"} %g\n", esc(s.Host), esc(s.GPU), d.dir, d.bps)
			}
		}
	}
	b.WriteString("# HELP collbench_watch_findings_total Ranks and links named or cleared since the collector started.\n")
	b.WriteString("# TYPE collbench_watch_findings_total counter\n")
	fmt.Fprintf(&b, "collbench_watch_findings_total %d\n", r.Total)
	for _, m := range []struct {
		name, help string
		v          int64
	}{
		{"processes_total", "Processes the collector admitted.", r.Counts.Processes},
		{"summaries_received_total", "Summaries received from the job's processes.", r.Counts.Summaries},
		{"summaries_dropped_total", "Summaries the collector dropped (malformed, beyond its bounds, or whose operation never completed).", r.Counts.Dropped},
		{"operations_judged_total", "Operations every rank reported, judged.", r.Counts.Operations},
		{"links_judged_total", "Link measurements judged (one link's sends in one operation).", r.Counts.Links},
		{"links_received_total", "Link measurements received in summaries, judged or not.", r.Counts.LinksIn},
	} {
		fmt.Fprintf(&b, "# HELP collbench_watch_%s %s\n# TYPE collbench_watch_%s counter\ncollbench_watch_%s %d\n", m.name, m.help, m.name, m.name, m.v)
	}
	b.WriteString("# HELP collbench_watch_communicators Communicators the collector follows.\n")
	b.WriteString("# TYPE collbench_watch_communicators gauge\n")
	fmt.Fprintf(&b, "collbench_watch_communicators %d\n", r.Counts.Communicators)
	_, err := io.WriteString(w, b.String())
	return err
}
