//go:build mpi

package bootstrap

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"
)

func TestPackWordsRoundTrips(t *testing.T) {
	for _, n := range []int{0, 1, 3, 4, 5, 255, bcastMax - 4} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + 1)
		}
		w := make([]uint32, (bcastMax-4)/4)
		packWords(w, b)
		if got := unpackWords(w, n); !bytes.Equal(got, b) {
			t.Errorf("%d bytes: packed and unpacked as %x, want %x", n, got, b)
		}
	}
}

// underMPIRun skips a test that needs a world of processes unless mpirun
// started this one (scripts/mpi-check.sh runs this package's tests under
// mpirun -np 4).
func underMPIRun(t *testing.T) *MPI {
	t.Helper()
	if os.Getenv("OMPI_COMM_WORLD_SIZE") == "" {
		t.Skip("needs mpirun (scripts/mpi-check.sh runs it under mpirun -np 4)")
	}
	m, err := JoinMPI()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMPIBroadcastStaysInItsFrame broadcasts into a frame with guard words
// behind it: every rank must get rank 0's words, and no rank's guard may
// change (a broadcast that counts bytes as 4-byte elements writes past it).
// Each rank's guard differs, so rank 0's guard copied over another's shows.
func TestMPIBroadcastStaysInItsFrame(t *testing.T) {
	m := underMPIRun(t)
	const frame, guard, mark = bcastMax / 4, 256, 0xfeedc0de
	words := make([]uint32, frame+guard)
	for i := range words {
		switch {
		case i >= frame:
			words[i] = mark ^ uint32(m.Rank())
		case m.Rank() == 0:
			words[i] = uint32(i)*2654435761 + 1
		}
	}
	m.bcastWords(words[:frame])
	for i, w := range words {
		want := uint32(i)*2654435761 + 1
		if i >= frame {
			want = mark ^ uint32(m.Rank())
		}
		if w != want {
			what := "the frame"
			if i >= frame {
				what = "the guard behind the frame"
			}
			t.Fatalf("rank %d of %d: word %d (in %s) is %#x, want %#x", m.Rank(), m.Size(), i, what, w, want)
		}
	}

	for _, n := range []int{0, 1, 37, bcastMax - 4} {
		var sent []byte
		if m.Rank() == 0 {
			sent = bytes.Repeat([]byte{byte(n)}, n)
		}
		got, err := m.bcast(sent)
		if err != nil {
			t.Fatalf("rank %d: broadcast of %d bytes: %v", m.Rank(), n, err)
		}
		if want := bytes.Repeat([]byte{byte(n)}, n); !bytes.Equal(got, want) {
			t.Fatalf("rank %d: broadcast of %d bytes arrived as %d bytes %q", m.Rank(), n, len(got), firstBytes(got))
		}
	}
	if _, err := m.bcast(make([]byte, bcastMax)); err == nil {
		t.Errorf("rank %d: a broadcast over %d bytes was not refused", m.Rank(), bcastMax-4)
	}
	if err := m.Finalize(30 * time.Second); err != nil {
		t.Fatalf("rank %d: %v", m.Rank(), err)
	}
}

func firstBytes(b []byte) string {
	if len(b) > 16 {
		return fmt.Sprintf("%x…", b[:16])
	}
	return fmt.Sprintf("%x", b)
}
