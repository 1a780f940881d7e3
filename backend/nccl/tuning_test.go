package nccl

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"collbench/internal/golden"
	"collbench/measure"
)

// TestParseTuningLog reads every log under testdata/tuning, captured from
// real NCCL versions or written in older versions' formats, against its
// golden file.
func TestParseTuningLog(t *testing.T) {
	logs, _ := filepath.Glob("testdata/tuning/*.log")
	if len(logs) == 0 {
		t.Fatal("no logs in testdata/tuning")
	}
	for _, path := range logs {
		t.Run(filepath.Base(path), func(t *testing.T) {
			fh, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			ds, err := ParseTuningLog(fh)
			if err != nil {
				t.Fatal(err)
			}
			if len(ds) == 0 {
				t.Fatal("no decisions read")
			}
			var b bytes.Buffer
			for _, d := range ds {
				line, _ := json.Marshal(struct {
					TuningDecision
					Shown string
				}{d, d.Choice().String()})
				b.Write(line)
				b.WriteByte('\n')
			}
			file := strings.TrimSuffix(path, ".log") + ".golden"
			if golden.Update() {
				if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil { //nolint:gosec // test files in the test's own temporary directory
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(b.Bytes(), want) {
				t.Errorf("parsed:\n%s\nwant:\n%s", b.Bytes(), want)
			}
		})
	}
}

func TestParseTuningLogFormats(t *testing.T) {
	cases := []struct {
		line string
		want TuningDecision
	}{
		{"h:1:2 [3] NCCL INFO 4096 Bytes -> Algo 1 proto 2 time 12.500000",
			TuningDecision{Device: 3, Bytes: 4096, Algo: "RING", Proto: "SIMPLE", ChannelLo: -1, ChannelHi: -1, ModelUS: 12.5}},
		{"h:1:2 [0] NCCL INFO ReduceScatter: 64 Bytes -> Algo 6 proto 0 time 3.000000",
			TuningDecision{Func: "ReduceScatter", Bytes: 64, Algo: "PAT", Proto: "LL", ChannelLo: -1, ChannelHi: -1, ModelUS: 3}},
		{"h:1:2 [1] NCCL INFO Broadcast: 1048576 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..7}",
			TuningDecision{Device: 1, Func: "Broadcast", Bytes: 1048576, Algo: "RING", Proto: "LL128", ChannelLo: 0, ChannelHi: 7, Channels: 8}},
		{"[2026-11-22 10:00:00] h:1:2 [0] NCCL INFO AllReduce: 8 Bytes -> Algo 9 proto 7 time 1.0",
			TuningDecision{Func: "AllReduce", Bytes: 8, Algo: "#9", Proto: "#7", ChannelLo: -1, ChannelHi: -1, ModelUS: 1}},
		{"h:1:2 [0] NCCL INFO AllGather [Symmetric]: 2048 Bytes -> Kernel AllGather_LL nchannels 4 nthreads 256 nWorks 2",
			TuningDecision{Func: "AllGather", Bytes: 2048, Algo: "AllGather_LL", Symmetric: true, Channels: 4, ChannelLo: -1, ChannelHi: -1}},
	}
	for _, tc := range cases {
		ds, err := ParseTuningLog(strings.NewReader(tc.line + "\nh:1:2 [0] NCCL INFO Channel 00/02 : 0 1\n"))
		if err != nil || len(ds) != 1 {
			t.Errorf("%q: %v %v", tc.line, ds, err)
			continue
		}
		if ds[0] != tc.want {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.line, ds[0], tc.want)
		}
	}
	if got := (TuningDecision{Algo: "RING", Proto: "LL128", ChannelLo: 0, ChannelHi: 15}).Choice().String(); got != "RING/LL128/16ch" {
		t.Errorf("choice shown as %q", got)
	}
}

func TestTuningLogUsable(t *testing.T) {
	for code, want := range map[int]bool{21806: false, 21903: false, 22005: true, 22304: true, 22803: true} {
		ok, why := TuningLogUsable(code)
		if ok != want || (!ok && !strings.Contains(why, "TRACE")) {
			t.Errorf("%d: %v %q", code, ok, why)
		}
	}
}

func TestMatchTuning(t *testing.T) {
	ar, bc := measure.AllReduce, measure.Broadcast
	named := func(fn string, b int64, algo string) TuningDecision {
		return TuningDecision{Func: fn, Bytes: b, Algo: algo, Proto: "LL", ChannelLo: -1, ChannelHi: -1}
	}
	bare := func(b int64, algo string) TuningDecision { return named("", b, algo) }
	cases := []struct {
		name    string
		calls   []ExpectedCall
		lines   []TuningDecision
		want    map[int]string // key -> algo
		wantErr string
	}{
		{"zipped", []ExpectedCall{{ar, 0}, {bc, 1}}, []TuningDecision{named("AllReduce", 8, "TREE"), named("Broadcast", 8, "RING")},
			map[int]string{0: "TREE", 1: "RING"}, ""},
		{"bare zipped", []ExpectedCall{{ar, 0}, {ar, 1}}, []TuningDecision{bare(8, "TREE"), bare(1024, "RING")},
			map[int]string{0: "TREE", 1: "RING"}, ""},
		{"two calls one key", []ExpectedCall{{ar, 4}, {ar, 4}}, []TuningDecision{named("AllReduce", 8, "TREE"), named("AllReduce", 8, "RING")},
			map[int]string{4: "TREE"}, ""},
		{"extra lines skipped by name", []ExpectedCall{{ar, 0}, {bc, 1}},
			[]TuningDecision{named("AllReduce", 8, "TREE"), named("AllGather", 8, "RING"), named("Broadcast", 8, "RING")},
			map[int]string{0: "TREE", 1: "RING"}, ""},
		{"missing line", []ExpectedCall{{ar, 0}, {bc, 1}}, []TuningDecision{named("AllReduce", 8, "TREE")},
			nil, "no Broadcast line"},
		{"bare count differs", []ExpectedCall{{ar, 0}, {ar, 1}}, []TuningDecision{bare(8, "TREE")},
			nil, "does not name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MatchTuning(tc.calls, tc.lines)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for k, a := range tc.want {
				if got[k].Algo != a {
					t.Errorf("key %d: %s, want %s", k, got[k].Algo, a)
				}
			}
		})
	}
}
