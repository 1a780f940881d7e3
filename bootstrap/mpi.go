//go:build mpi

package bootstrap

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	mpi "github.com/sbromberger/gompi"
)

// HasMPI reports whether this build can join an MPI world.
const HasMPI = true

// MPI is this process's membership of an MPI job. MPI is initialised
// without thread support, so every MPI call runs on one locked OS thread
// (Do). MPI only starts the world: the control connection is collbench's
// TCP tree, with its heartbeats, whose rendezvous address rank 0 shares
// over MPI (JoinOverMPI). The mpi backend moves collective data over MPI.
type MPI struct {
	thread *osThread
	comm   *mpi.Communicator
	rank   int
	size   int
	once   sync.Once
}

var (
	current   *MPI
	currentMu sync.Mutex
)

// JoinMPI initialises MPI (once per process).
func JoinMPI() (*MPI, error) {
	currentMu.Lock()
	defer currentMu.Unlock()
	if current != nil {
		return current, nil
	}
	m := &MPI{thread: startOSThread()}
	m.Do(func() {
		mpi.Start(false) // gompi: MPI_Init
		m.comm = mpi.NewCommunicator(nil)
		m.rank, m.size = m.comm.Rank(), m.comm.Size()
	})
	current = m
	return m, nil
}

// CurrentMPI is the process's MPI membership, once JoinMPI has run.
func CurrentMPI() (*MPI, error) {
	currentMu.Lock()
	defer currentMu.Unlock()
	if current == nil {
		return nil, errors.New("MPI is not initialised: this process was not started by mpirun (run it as mpirun -np N bin/collbench-mpi ...)")
	}
	return current, nil
}

// Do runs f on the MPI thread and waits for it. Called from the MPI thread
// itself (f of an earlier Do), it runs f at once.
func (m *MPI) Do(f func()) { m.thread.Do(f) }

// Rank is this process's MPI rank.
func (m *MPI) Rank() int { return m.rank }

// Size is the number of MPI processes.
func (m *MPI) Size() int { return m.size }

// JoinOverMPI forms collbench's TCP world of the MPI job's processes: rank
// 0 listens on a free port of the address its peers reach it at (the first
// address of an interface that is up, loopback when every process runs on
// this host) and broadcasts it with a fresh job secret over MPI; then every
// process joins the rendezvous as under any other launcher.
func JoinOverMPI(ctx context.Context, m *MPI, o TCPOptions) (*TCP, error) {
	o.Rank, o.Size = m.rank, m.size
	type invite struct {
		Addr  string `json:"addr"`
		Token []byte `json:"token"`
		Err   string `json:"err,omitempty"`
	}
	var in invite
	if m.rank == 0 {
		ip := outwardIP()
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			in.Err = fmt.Sprintf("rank 0 cannot listen on %s: %v", ip, err)
		} else {
			in.Addr = ln.Addr().String()
			in.Token = make([]byte, 32)
			_, _ = rand.Read(in.Token)
			o.Listener = ln
		}
	}
	blob, _ := json.Marshal(in)
	blob, err := m.bcast(blob)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(blob, &in); err != nil {
		return nil, fmt.Errorf("malformed rendezvous invitation from MPI rank 0")
	}
	if in.Err != "" {
		return nil, errors.New(in.Err)
	}
	o.Addr, o.Token = in.Addr, in.Token
	return Join(ctx, o)
}

// bcastMax bounds the invitation rank 0 broadcasts, in bytes.
const bcastMax = 1024

// bcast sends rank 0's bytes (at most bcastMax-4) to every rank: one
// MPI_Bcast of a fixed-size frame, a length first.
func (m *MPI) bcast(data []byte) ([]byte, error) {
	if len(data) > bcastMax-4 {
		return nil, fmt.Errorf("MPI broadcast of %d bytes is over %d", len(data), bcastMax-4)
	}
	frame := make([]uint32, bcastMax/4)
	if m.rank == 0 {
		frame[0] = uint32(len(data))
		packWords(frame[1:], data)
	}
	m.bcastWords(frame)
	n := int(frame[0])
	if n > bcastMax-4 {
		return nil, errors.New("malformed MPI broadcast")
	}
	return unpackWords(frame[1:], n), nil
}

// bcastWords broadcasts words from rank 0 into every rank's words, and
// writes nothing past them. It goes through gompi's BcastUint32s, whose
// count is in the slice's own elements: gompi v0.2.0's BcastBytes passes a
// byte count with a 4-byte MPI type, and so writes four times the slice's
// length into it on every rank but the root (it corrupted the Go heap).
func (m *MPI) bcastWords(words []uint32) {
	if len(words) == 0 {
		return
	}
	m.Do(func() { m.comm.BcastUint32s(words, 0) }) // gompi: MPI_Bcast of MPI_UINT32_T
}

// packWords puts b into w, four bytes a word, little end first.
func packWords(w []uint32, b []byte) {
	for i, c := range b {
		w[i/4] |= uint32(c) << (8 * (i % 4))
	}
}

// unpackWords is the first n bytes packWords put into w.
func unpackWords(w []uint32, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(w[i/4] >> (8 * (i % 4)))
	}
	return b
}

// finalizeGrace is how long Finalize waits for a call still on the MPI
// thread before it takes that call for one a fault left waiting.
const finalizeGrace = time.Second

// Finalize ends MPI: a barrier of every process, then MPI_Finalize. A
// process that another one's fault left alone would wait for ever, so it
// waits at most bound and then leaves MPI to end with the process.
func (m *MPI) Finalize(bound time.Duration) error {
	var err error
	m.once.Do(func() {
		// A call that has just handed back its result may not have left
		// the MPI thread yet (it was once taken for a stuck call, and MPI
		// was left unfinalised after a clean run).
		if !m.thread.idle(min(finalizeGrace, bound)) {
			// A call another process's fault left waiting holds the MPI
			// thread: MPI ends with the process.
			err = errors.New("MPI is still inside a call that will not return; it ends with the process")
			return
		}
		done := make(chan struct{})
		go m.Do(func() {
			m.comm.Barrier()
			mpi.Stop()
			close(done)
		})
		select {
		case <-done:
		case <-time.After(bound):
			err = fmt.Errorf("MPI did not finalise within %v (another process has stopped)", bound)
		}
	})
	return err
}

// outwardIP is the address the other processes reach this one at: the
// first IPv4 address of an interface that is up and not loopback, else
// loopback.
func outwardIP() string {
	ifs, err := net.Interfaces()
	if err != nil {
		return "127.0.0.1"
	}
	for _, inf := range ifs {
		if inf.Flags&net.FlagUp == 0 || inf.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := inf.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}
