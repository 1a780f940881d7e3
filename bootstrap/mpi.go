//go:build mpi

package bootstrap

import (
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"runtime"
	"strings"

	mpi "github.com/sbromberger/gompi"
)

// HasMPI reports whether this build can join an MPI world.
const HasMPI = true

// MPI is a world of processes joined by MPI. Every MPI call runs on one
// locked OS thread.
type MPI struct {
	tasks chan func()
	comm  *mpi.Communicator
	rank  int
	size  int
	hosts []string
}

// JoinMPI initialises MPI, shares every rank's host and checks that every
// rank runs the same arguments.
func JoinMPI(host string, args []string) (*MPI, error) {
	m := &MPI{tasks: make(chan func())}
	go func() {
		runtime.LockOSThread()
		for f := range m.tasks {
			f()
		}
	}()
	m.do(func() {
		mpi.Start(false)
		m.comm = mpi.NewCommunicator(nil)
		m.rank, m.size = m.comm.Rank(), m.comm.Size()
	})
	type ident struct {
		Host string   `json:"host"`
		Args []string `json:"args"`
	}
	me, _ := json.Marshal(ident{host, args})
	all, err := m.AllGather(me)
	if err != nil {
		return nil, err
	}
	var first ident
	for r, b := range all {
		var id ident
		if err := json.Unmarshal(b, &id); err != nil {
			return nil, fmt.Errorf("malformed MPI handshake from rank %d", r)
		}
		if r == 0 {
			first = id
		} else if !reflect.DeepEqual(id.Args, first.Args) {
			return nil, fmt.Errorf("rank %d (%s) was started with different arguments: %q; rank 0 has %q",
				r, id.Host, strings.Join(id.Args, " "), strings.Join(first.Args, " "))
		}
		m.hosts = append(m.hosts, id.Host)
	}
	return m, nil
}

func (m *MPI) do(f func()) {
	done := make(chan struct{})
	m.tasks <- func() { f(); close(done) }
	<-done
}

// Rank is this process's MPI rank.
func (m *MPI) Rank() int { return m.rank }

// Size is the number of MPI processes.
func (m *MPI) Size() int { return m.size }

// LocalIP is the address the other processes reach this one at.
func (m *MPI) LocalIP() string { return dataIP(m.hosts, m.rank) }

// Hosts lists each rank's host.
func (m *MPI) Hosts() []string { return m.hosts }

// AllGather gathers every rank's bytes at rank 0, which sends the whole
// list back to each rank; point-to-point messages only. Every message
// carries a leading marker byte so none is empty.
func (m *MPI) AllGather(data []byte) ([][]byte, error) {
	const up, down = 77, 78
	var blob []byte
	m.do(func() {
		if m.rank == 0 {
			all := make([][]byte, m.size)
			all[0] = append([]byte{1}, data...)
			for r := 1; r < m.size; r++ {
				all[r], _ = m.comm.RecvBytes(r, up)
			}
			blob = append([]byte{1}, encodeList(all)...)
			for r := 1; r < m.size; r++ {
				m.comm.SendBytes(blob, r, down)
			}
		} else {
			m.comm.SendBytes(append([]byte{1}, data...), 0, up)
			blob, _ = m.comm.RecvBytes(0, down)
		}
	})
	if len(blob) < 1 {
		return nil, fmt.Errorf("malformed MPI message")
	}
	all, err := decodeList(blob[1:])
	if err != nil {
		return nil, err
	}
	for r := range all {
		if len(all[r]) > 0 {
			all[r] = all[r][1:]
		}
	}
	return all, nil
}

// Gather returns every rank's bytes, by rank, on rank 0; the others get nil.
// It uses the same point-to-point messages as AllGather, without the answer.
func (m *MPI) Gather(data []byte) ([][]byte, error) {
	const up = 79
	var all [][]byte
	m.do(func() {
		if m.rank == 0 {
			all = make([][]byte, m.size)
			all[0] = append([]byte{1}, data...)
			for r := 1; r < m.size; r++ {
				all[r], _ = m.comm.RecvBytes(r, up)
			}
		} else {
			m.comm.SendBytes(append([]byte{1}, data...), 0, up)
		}
	})
	for r := range all {
		if len(all[r]) < 1 {
			return nil, fmt.Errorf("malformed MPI message from rank %d", r)
		}
		all[r] = all[r][1:]
	}
	return all, nil
}

// Abort ends every process of the MPI job.
func (m *MPI) Abort(cause error) {
	fmt.Printf("collbench: rank %d failed, aborting the MPI job: %v\n", m.rank, cause)
	m.comm.Abort(3)
}

// Close waits at a barrier and finalises MPI.
func (m *MPI) Close() error {
	m.do(func() {
		m.comm.Barrier()
		mpi.Stop()
	})
	close(m.tasks)
	return nil
}

// dataIP picks the address this process's peers reach it at when no
// rendezvous connection says (MPI): loopback when every process is on this
// host, else the first address of an interface that is up and not loopback.
func dataIP(hosts []string, me int) string {
	same := true
	for _, h := range hosts {
		same = same && h == hosts[me]
	}
	if same {
		return "127.0.0.1"
	}
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
