package render

import (
	"fmt"
	"io"
	"strings"

	"collbench/doctor/internal/record"
)

// WriteProm writes the report in Prometheus' text exposition format, for
// node-exporter's textfile collector.
func WriteProm(r *record.Report, w io.Writer) error {
	esc := func(s string) string { return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) }
	healthy := 0
	if r.Healthy {
		healthy = 1
	}
	fmt.Fprintln(w, "# HELP collbench_doctor_healthy 1 when collbench doctor found nothing wrong.")
	fmt.Fprintln(w, "# TYPE collbench_doctor_healthy gauge")
	fmt.Fprintf(w, "collbench_doctor_healthy{mode=%q} %d\n", r.Mode, healthy)
	fmt.Fprintln(w, "# HELP collbench_doctor_findings Findings by severity.")
	fmt.Fprintln(w, "# TYPE collbench_doctor_findings gauge")
	for _, sev := range []string{"FAIL", "WARN"} {
		n := 0
		for _, f := range r.Findings {
			if f.Severity == sev {
				n++
			}
		}
		fmt.Fprintf(w, "collbench_doctor_findings{severity=%q} %d\n", sev, n)
	}
	fmt.Fprintln(w, "# HELP collbench_doctor_finding One line per finding (value 1).")
	fmt.Fprintln(w, "# TYPE collbench_doctor_finding gauge")
	for _, f := range r.Findings {
		fmt.Fprintf(w, "collbench_doctor_finding{severity=\"%s\",stage=\"%s\",kind=\"%s\",part=\"%s\"} 1\n", f.Severity, f.Stage, f.Kind, esc(f.Part))
	}
	fmt.Fprintln(w, "# HELP collbench_doctor_gpu_copy_gbps Device-to-device copy bandwidth of each GPU alone.")
	fmt.Fprintln(w, "# TYPE collbench_doctor_gpu_copy_gbps gauge")
	for _, g := range r.GPUs {
		fmt.Fprintf(w, "collbench_doctor_gpu_copy_gbps{host=\"%s\",rank=\"%d\",bus_id=\"%s\"} %g\n", esc(g.Host), g.Rank, g.BusID, g.CopyGBps)
		if g.CopyExpected > 0 {
			fmt.Fprintf(w, "collbench_doctor_gpu_copy_expected_gbps{host=\"%s\",rank=\"%d\",bus_id=\"%s\"} %g\n", esc(g.Host), g.Rank, g.BusID, g.CopyExpected)
		}
		if g.FillExpected > 0 {
			fmt.Fprintf(w, "collbench_doctor_gpu_fill_expected_gelem{host=\"%s\",rank=\"%d\",bus_id=\"%s\"} %g\n", esc(g.Host), g.Rank, g.BusID, g.FillExpected)
		}
	}
	fmt.Fprintln(w, "# HELP collbench_doctor_pair_gbps One-way bandwidth of each GPU pair within a host.")
	fmt.Fprintln(w, "# TYPE collbench_doctor_pair_gbps gauge")
	for _, p := range r.Pairs {
		fmt.Fprintf(w, "collbench_doctor_pair_gbps{host=\"%s\",src=\"%d\",dst=\"%d\",class=\"%s\"} %g\n", esc(p.Host), p.A, p.B, p.Class, p.AB)
		fmt.Fprintf(w, "collbench_doctor_pair_gbps{host=\"%s\",src=\"%d\",dst=\"%d\",class=\"%s\"} %g\n", esc(p.Host), p.B, p.A, p.Class, p.BA)
	}
	if r.World != nil {
		fmt.Fprintln(w, "# HELP collbench_doctor_world_busbw_gbps Allreduce bus bandwidth over the whole world.")
		fmt.Fprintln(w, "# TYPE collbench_doctor_world_busbw_gbps gauge")
		fmt.Fprintf(w, "collbench_doctor_world_busbw_gbps{ranks=\"%d\"} %g\n", r.World.Ranks, r.World.BusBW)
	}
	if len(r.Stages) > 0 {
		fmt.Fprintln(w, "# HELP collbench_doctor_stage_seconds How long each stage ran (skipped stages are absent).")
		fmt.Fprintln(w, "# TYPE collbench_doctor_stage_seconds gauge")
		for _, s := range r.Stages {
			if s.Skipped == "" {
				fmt.Fprintf(w, "collbench_doctor_stage_seconds{stage=\"%s\"} %g\n", esc(s.Stage), s.Seconds)
			}
		}
	}
	if len(r.Counters) > 0 {
		type key struct{ host, part, counter string }
		growth, bytes := map[key]uint64{}, map[key]float64{}
		var keys []key
		for _, c := range r.Counters {
			k := key{c.Host, c.Part.Name(), c.Counter}
			if _, ok := growth[k]; !ok {
				keys = append(keys, k)
			}
			growth[k] += c.Growth()
			bytes[k] += c.GB()
		}
		fmt.Fprintln(w, "# HELP collbench_doctor_counter_growth How much each error counter grew while doctor ran, by part (the stages summed; XIDs count events).")
		fmt.Fprintln(w, "# TYPE collbench_doctor_counter_growth gauge")
		for _, k := range keys {
			fmt.Fprintf(w, "collbench_doctor_counter_growth{host=\"%s\",part=\"%s\",counter=\"%s\"} %d\n", esc(k.host), esc(k.part), k.counter, growth[k])
		}
		fmt.Fprintln(w, "# HELP collbench_doctor_counter_traffic_gb The traffic over the part while its counter grew, in GB.")
		fmt.Fprintln(w, "# TYPE collbench_doctor_counter_traffic_gb gauge")
		for _, k := range keys {
			fmt.Fprintf(w, "collbench_doctor_counter_traffic_gb{host=\"%s\",part=\"%s\",counter=\"%s\"} %g\n", esc(k.host), esc(k.part), k.counter, bytes[k])
		}
	}
	if len(r.History) > 0 {
		fmt.Fprintln(w, "# HELP collbench_doctor_history_ratio Each figure now over its baseline in the node's own past runs (the median; for counters, the highest rate per GB).")
		fmt.Fprintln(w, "# TYPE collbench_doctor_history_ratio gauge")
		for _, c := range r.History {
			if c.Baseline > 0 {
				fmt.Fprintf(w, "collbench_doctor_history_ratio{host=\"%s\",part=\"%s\",metric=\"%s\",runs=\"%d\"} %g\n", esc(c.Host), esc(c.Part), esc(c.Metric), c.Runs, c.Ratio())
			}
		}
		fmt.Fprintln(w, "# HELP collbench_doctor_history_flagged 1 where the figure crossed the history rules.")
		fmt.Fprintln(w, "# TYPE collbench_doctor_history_flagged gauge")
		for _, c := range r.History {
			v := 0
			if c.Flagged {
				v = 1
			}
			fmt.Fprintf(w, "collbench_doctor_history_flagged{host=\"%s\",part=\"%s\",metric=\"%s\"} %d\n", esc(c.Host), esc(c.Part), esc(c.Metric), v)
		}
	}
	fmt.Fprintln(w, "# HELP collbench_doctor_seconds How long the doctor ran, from the start of the command.")
	fmt.Fprintln(w, "# TYPE collbench_doctor_seconds gauge")
	_, err := fmt.Fprintf(w, "collbench_doctor_seconds %g\n", r.Seconds)
	return err
}
