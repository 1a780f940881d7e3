package watch

import (
	"encoding/json"
	"math/rand"
	"testing"
)

// BenchmarkCollector measures what one collector judges: summaries of a
// communicator of 1,024 ranks (a ring), each operation complete; with
// links, every rank's sends to its next rank, as one operation in four
// of the plugin's carry. It reports summaries per second.
func BenchmarkCollector(b *testing.B) {
	for _, tc := range []struct {
		name  string
		links bool
	}{{"ranks", false}, {"ranks+links", true}} {
		b.Run(tc.name, func(b *testing.B) {
			const ranks = 1024
			j := &ringJob{ranks: ranks, rng: rand.New(rand.NewSource(1)), slowFrom: -1, bytes: 1 << 20} //nolint:gosec // G404: a seeded model
			ops := make([][]Summary, 64)
			for i := range ops {
				ops[i] = j.op(1, uint64(i+1)) //nolint:gosec // G115: small numbers
				if !tc.links {
					for k := range ops[i] {
						ops[i][k].Links = nil
					}
				}
			}
			c := New(DefaultOptions())
			b.ResetTimer()
			n := 0
			for i := 0; i < b.N; i++ {
				seq := uint64(i + 1) //nolint:gosec // G115: a loop index
				for _, s := range ops[i%len(ops)] {
					s.Seq = seq
					c.Add(s)
					n++
				}
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "summaries/s")
		})
	}
}

// BenchmarkBatchDecode measures the collector's reading of the wire: one
// batch of 1,000 summaries as a process sends it, decoded. It reports
// summaries per second.
func BenchmarkBatchDecode(b *testing.B) {
	j := &ringJob{ranks: 8, rng: rand.New(rand.NewSource(1)), slowFrom: -1, bytes: 1 << 20} //nolint:gosec // G404: a seeded model
	var batch []Summary
	for len(batch) < 1000 {
		for _, s := range j.op(1, uint64(len(batch)+1)) { //nolint:gosec // G115: small numbers
			s.Host, s.GPU, s.Clock, s.Links = "node0042", "0000:18:00.0", "0f2c9a4e-1b7d-4c8e-9a51-0d6f3e2b7c10/monotonic", nil
			batch = append(batch, s)
		}
	}
	raw, err := json.Marshal(batch)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var got []Summary
		if err := json.Unmarshal(raw, &got); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "summaries/s")
	b.ReportMetric(float64(len(raw))/float64(len(batch)), "bytes/summary")
}
