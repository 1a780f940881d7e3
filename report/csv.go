package report

import (
	"encoding/csv"
	"io"
	"math"
	"sort"
	"strconv"

	"collbench/results"
)

// CSVHeader is the first line of CSV output.
var CSVHeader = []string{"collective", "dtype", "op", "root", "ranks", "size_bytes", "count",
	"mode", "time_us", "algbw_gbps", "busbw_gbps", "wrong"}

// WriteCSV writes one line per row and mode. wrong is empty when unchecked.
func WriteCSV(w io.Writer, d *results.Document) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	// Times in µs and bandwidths in GB/s to three decimals: nanoseconds and
	// MB/s, finer than any clock collbench reads; no binary-fraction tails.
	f := func(v float64) string { return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64) }
	for _, r := range d.Results {
		for _, m := range []struct {
			name string
			h    *results.Half
		}{{"out-of-place", r.OutOfPlace}, {"in-place", r.InPlace}} {
			if m.h == nil {
				continue
			}
			wrong := ""
			if m.h.Wrong != nil {
				wrong = strconv.FormatInt(*m.h.Wrong, 10)
			}
			rec := []string{r.Collective, r.DType, r.Op, strconv.Itoa(r.Root), strconv.Itoa(r.Ranks),
				strconv.FormatInt(r.SizeBytes, 10), strconv.FormatInt(r.Count, 10), m.name,
				f(m.h.TimeUS), f(m.h.AlgBW), f(m.h.BusBW), wrong}
			if err := cw.Write(rec); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
