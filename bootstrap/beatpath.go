package bootstrap

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// beatPath carries heartbeats as small UDP datagrams, apart from the
// control connection, so a beat never waits behind a control message in a
// TCP stream, and a process whose heartbeats stop is named within the
// silence bound. Each datagram names its sender and a sequence number and,
// with a job secret, is signed with a key derived from it: a datagram that
// is not this job's, or that replays an older one, is dropped.
type beatPath struct {
	conn *net.UDPConn
	key  []byte // nil: no job secret, datagrams are not signed
	me   int

	mu    sync.Mutex
	addrs map[int]*net.UDPAddr // where each watched rank's beats go

	seq   atomic.Uint64
	heard []atomic.Int64  // unix ns of the last valid beat from each rank; 0 never
	last  []atomic.Uint64 // the highest sequence number taken from each rank
}

// beatPathOff, for tests only, leaves every process without a heartbeat
// socket (the beats ride the control connections), so that more in-process
// members fit one process's descriptors.
var beatPathOff bool

// beatLen is a datagram: "CBHB", the sender's rank (4 bytes), its
// sequence number (8), and 16 bytes of signature.
const beatLen = 4 + 4 + 8 + 16

var beatMagic = [4]byte{'C', 'B', 'H', 'B'}

// openBeatPath opens a UDP socket on ip (any port) for rank me of a world
// of size; token is the job secret, or nil.
func openBeatPath(ip string, token []byte, me, size int) (*beatPath, error) {
	if beatPathOff {
		return nil, errors.New("heartbeat datagrams are off")
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		return nil, err
	}
	b := &beatPath{conn: conn, me: me, addrs: map[int]*net.UDPAddr{}, heard: make([]atomic.Int64, size), last: make([]atomic.Uint64, size)}
	if token != nil {
		m := hmac.New(sha256.New, token)
		m.Write([]byte("collbench/heartbeat"))
		b.key = m.Sum(nil)
	}
	return b, nil
}

// port is the socket's port, 0 without a path.
func (b *beatPath) port() int {
	if b == nil {
		return 0
	}
	return b.conn.LocalAddr().(*net.UDPAddr).Port
}

// watch sends this process's beats for rank r to its port at the address
// the control connection reaches it at.
func (b *beatPath) watch(r int, ctl net.Addr, port int) {
	tcp, ok := ctl.(*net.TCPAddr)
	if b == nil || !ok || port <= 0 {
		return
	}
	b.mu.Lock()
	b.addrs[r] = &net.UDPAddr{IP: tcp.IP, Port: port, Zone: tcp.Zone}
	b.mu.Unlock()
}

// mac is the signature of a datagram's first 16 bytes.
func (b *beatPath) mac(d []byte) []byte {
	m := hmac.New(sha256.New, b.key)
	m.Write(d[:16])
	return m.Sum(nil)[:16]
}

func (b *beatPath) sign(d []byte) {
	if b.key != nil {
		copy(d[16:], b.mac(d))
	}
}

// send sends one beat to every watched rank; a lost datagram is a missed
// beat, which the silence bound allows for.
func (b *beatPath) send() {
	if b == nil {
		return
	}
	var d [beatLen]byte
	copy(d[:4], beatMagic[:])
	binary.BigEndian.PutUint32(d[4:], uint32(b.me)) //nolint:gosec // G115: a rank, far below 2^31
	binary.BigEndian.PutUint64(d[8:], b.seq.Add(1))
	b.sign(d[:])
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range b.addrs {
		_ = b.conn.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = b.conn.WriteToUDP(d[:], a) // a failed send is a missed beat
	}
}

// accept checks a datagram and returns its sender, or -1.
func (b *beatPath) accept(d []byte) int {
	if len(d) != beatLen || [4]byte(d[:4]) != beatMagic {
		return -1
	}
	r := int(binary.BigEndian.Uint32(d[4:]))
	seq := binary.BigEndian.Uint64(d[8:])
	if r < 0 || r >= len(b.heard) || r == b.me {
		return -1
	}
	if b.key != nil && !hmac.Equal(d[16:], b.mac(d)) {
		return -1
	}
	for {
		last := b.last[r].Load()
		if seq <= last {
			return -1 // a replay, or overtaken by a newer beat
		}
		if b.last[r].CompareAndSwap(last, seq) {
			return r
		}
	}
}

// serve reads beats until the socket closes, telling heard of each.
func (b *beatPath) serve(heard func(rank int)) {
	if b == nil {
		return
	}
	buf := make([]byte, 64)
	for {
		n, _, err := b.conn.ReadFromUDP(buf)
		if err != nil {
			return // closed
		}
		if r := b.accept(buf[:n]); r >= 0 {
			b.heard[r].Store(time.Now().UnixNano())
			heard(r)
		}
	}
}

// heardFrom says whether a beat of rank r ever arrived on this path.
func (b *beatPath) heardFrom(r int) bool {
	return b != nil && r >= 0 && r < len(b.heard) && b.heard[r].Load() != 0
}

func (b *beatPath) close() {
	if b != nil {
		_ = b.conn.Close()
	}
}
