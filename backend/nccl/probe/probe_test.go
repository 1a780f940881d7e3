package probe

import (
	"bytes"
	"encoding/binary"
	"testing"

	"collbench/bootstrap"
	"collbench/measure"
)

func TestProbeFrames(t *testing.T) {
	var b bytes.Buffer
	parts := [][]byte{[]byte("a"), nil, {}, bytes.Repeat([]byte("x"), 1000)}
	if err := bootstrap.WriteFrame(&b, frameData, encodeParts(parts)); err != nil {
		t.Fatal(err)
	}
	typ, p, err := bootstrap.ReadFrame(&b, maxFrameBytes)
	if err != nil || typ != frameData {
		t.Fatalf("read %q %v", typ, err)
	}
	got, err := decodeParts(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || string(got[0]) != "a" || got[1] != nil || got[2] == nil || len(got[3]) != 1000 {
		t.Fatalf("parts came back as %q", got)
	}
	// Damaged input is an error, never a panic.
	for _, bad := range [][]byte{nil, {0, 0, 0, 9}, {0, 0, 0, 1, 0, 0, 0, 50, 1}} {
		if _, err := decodeParts(bad); err == nil {
			t.Errorf("decodeParts(%v) accepted it", bad)
		}
	}
	var big bytes.Buffer
	big.Write([]byte{frameData})
	_ = binary.Write(&big, binary.BigEndian, uint32(maxFrameBytes+1))
	if _, _, err := bootstrap.ReadFrame(&big, maxFrameBytes); err == nil {
		t.Error("a frame over the limit was read")
	}
}

func TestDescribeStage(t *testing.T) {
	spec := Spec{Cases: []measure.Case{{Coll: measure.AllReduce}, {Coll: measure.Broadcast}}, Plan: measure.Plan{Sizes: []int64{1024, 1 << 20}}}
	for stage, want := range map[int]string{
		stageStarting: "while opening its communicators",
		stageOpen:     "before its first operation",
		0:             "at row 1 of 4, allreduce 1.0 KiB",
		3:             "at row 4 of 4, broadcast 1.0 MiB",
	} {
		if got := describeStage(stage, spec); got != want {
			t.Errorf("stage %d: %q, want %q", stage, got, want)
		}
	}
}
