package tunefile

import (
	"bytes"
	"strings"
	"testing"
)

// TestFileRoundTrip: entries written in the example plugin's format read
// back the same, with the optional fields defaulted and comments kept out.
func TestFileRoundTrip(t *testing.T) {
	es := []Entry{
		{Collective: "allreduce", MinBytes: 0, MaxBytes: 65535, Algorithm: "tree", Protocol: "ll", Channels: -1, NNodes: 1, NRanks: 4, NumPipeOps: -1, RegBuff: -1},
		{Collective: "allreduce", MinBytes: 65536, MaxBytes: 1 << 30, Algorithm: "ring", Protocol: "simple", Channels: 16, NNodes: 1, NRanks: 4, NumPipeOps: -1, RegBuff: 0},
		{Collective: "allgather", MinBytes: 8, MaxBytes: 4096, Algorithm: "ring", Protocol: "ll128", Channels: -1, NNodes: -1, NRanks: -1, NumPipeOps: 1, RegBuff: 1},
	}
	var b bytes.Buffer
	if err := Write(&b, es, "measured by collbench tune on 4x H200"); err != nil {
		t.Fatal(err)
	}
	got, err := Read(&b, "t.conf")
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if len(got) != len(es) {
		t.Fatalf("%d entries back, want %d", len(got), len(es))
	}
	for i := range es {
		g := got[i]
		g.Line = 0
		if g != es[i] {
			t.Errorf("entry %d: %+v, want %+v", i, g, es[i])
		}
	}
	// The chunk, an eleventh field, reads back; a line without it keeps
	// NCCL's chunk.
	chunked, err := Read(strings.NewReader("allgather,0,8388608,ring,simple,-1,-1,4,-1,-1,1048576\nallgather,8388609,16777216,ring,simple,-1,-1,4\n"), "c.conf")
	if err != nil || chunked[0].Chunk != 1<<20 || chunked[1].Chunk != 0 {
		t.Errorf("the chunk field: %+v, %v", chunked, err)
	}
	var out strings.Builder
	if err := Write(&out, chunked); err != nil || !strings.Contains(out.String(), ",-1,-1,1048576\n") || strings.Count(out.String(), ",1048576") != 1 {
		t.Errorf("written: %q, %v: want the chunk only on the line that has one", out.String(), err)
	}
	if ls := Lines(chunked); len(ls) != 2 || ls[0].Chunk != 1<<20 || ls[1].Chunk != 0 {
		t.Errorf("the plugin's lines: %+v", ls)
	}
	// The last two fields are optional, as the plugin reads them.
	short, err := Read(strings.NewReader("# c\n\nbroadcast,0,100,ring,simple,-1,-1,-1\n"), "s.conf")
	if err != nil || short[0].NumPipeOps != -1 || short[0].RegBuff != -1 || short[0].Line != 3 {
		t.Errorf("8 fields: %+v, %v", short, err)
	}
}

// TestFileBadInput: every malformed tuner file is refused with its line
// and what is wrong.
func TestFileBadInput(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"", "no entries"},
		{"# only a comment\n", "no entries"},
		{"allreduce,0,100,ring\n", "line 1: 4 fields, expected 8 to 11"},
		{"allreduce,0,100,ring,simple,-1,-1,-1,-1,-1,7\n", `chunkBytes "7" must be 4096 to 16777216 bytes`},
		{"allreduce,0,100,ring,simple,-1,-1,-1,-1,-1,1K\n", `chunkBytes "1K"`},
		{"allreduce,0,100,ring,simple,-1,-1,-1,-1,-1,65536,1\n", "12 fields"},
		{"alltoall,0,100,ring,simple,-1,-1,-1\n", `unknown collective "alltoall"`},
		{"allreduce,0,100,spiral,simple,-1,-1,-1\n", `unknown algorithm "spiral"`},
		{"allreduce,0,100,ring,fast,-1,-1,-1\n", `unknown protocol "fast"`},
		{"allreduce,x,100,ring,simple,-1,-1,-1\n", `min_bytes "x"`},
		{"allreduce,200,100,ring,simple,-1,-1,-1\n", "max_bytes 100 is below min_bytes 200"},
		{"allreduce,0,100,ring,simple,0,-1,-1\n", `channels "0" must be a positive count, or -1`},
		{"allreduce,0,100,ring,simple,-1,-2,-1\n", `nNodes "-2"`},
		{"allreduce,0,100,ring,simple,-1,-1,-1,-1,2\n", `regBuff "2"`},
		{"allreduce,0,100,ring,simple,-1,1,4\n# x\nallreduce,50,200,tree,ll,-1,1,4\n", "lines 1 and 3 overlap"},
	} {
		_, err := Read(strings.NewReader(c.text), "bad.conf")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "bad.conf: ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want one line with %q", c.text, err, c.want)
		}
	}
	// Ranges that touch nothing, or differ in their dimensions, are fine.
	if _, err := Read(strings.NewReader("allreduce,0,99,ring,simple,-1,1,4\nallreduce,100,200,tree,ll,-1,1,4\nallreduce,0,200,tree,ll,-1,2,8\n"), "ok.conf"); err != nil {
		t.Error(err)
	}
}
