package bootstrap

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Frame types of the control protocol.
const (
	frameChallenge = 1 // rank 0 -> newcomer: a fresh nonce to prove the secret against
	frameHello     = 2 // newcomer -> rank 0: who it is, with its proof
	frameWelcome   = 3 // rank 0 -> rank: every rank arrived; the hosts; rank 0's proof
	frameError     = 4 // rank 0 -> newcomer: refused or the rendezvous failed, and why
	frameData      = 5
	frameAbort     = 6  // a fault that stops the world (JSON PeerError)
	frameBeat      = 7  // heartbeat; up the tree it carries the subtree's progress
	frameWorld     = 8  // parent -> child: the world formed; every rank's host and pid
	frameTreeHello = 9  // child -> parent: who it is, with its proof
	frameJoined    = 10 // child -> parent: ranks that joined the tree below it
	frameNotice    = 11 // a word for every process, not a fault: floods the tree once
)

const (
	// maxHello bounds what a connection may send before it is admitted.
	maxHello = 64 << 10
	// maxFrame bounds one control message after admission: control carries
	// ids, layouts, results and heartbeats, never collective data.
	maxFrame = 4 << 20
	// handshakeTimeout bounds each newcomer's handshake.
	handshakeTimeout = 5 * time.Second
	// maxRefusals bounds the refused connections an error message lists.
	maxRefusals = 4
)

// Defaults of the heartbeat.
const (
	DefaultBeatEvery = time.Second
	DefaultSilence   = 6 * time.Second
	// DefaultFanout is how many children a process of the bootstrap tree
	// serves: 8,192 ranks are three levels below rank 0.
	DefaultFanout = 32
)

// TCPOptions configure Join.
type TCPOptions struct {
	Rank, Size int
	// Addr is rank 0's address, host:port. Rank 0 listens on exactly this
	// address (a host name is resolved to this host's own address).
	Addr string
	// Host is this process's host identity (NCCL_HOSTID or the hostname).
	Host string
	// Args are compared at rendezvous: every rank must run the same command.
	Args []string
	// Timeout bounds the whole rendezvous.
	Timeout time.Duration
	// Token is the job secret; nil lets any process that reaches rank 0
	// join (a warning says so when the address is not loopback).
	Token []byte
	// BeatEvery is the heartbeat period and Silence how long a process may
	// go unheard before it is declared stopped (defaults above).
	BeatEvery, Silence time.Duration
	// Warn receives one-line warnings (rank 0 only); nil discards them.
	Warn func(string)
	// Fanout is how many children each process of the bootstrap tree
	// serves; rank 0's value holds for the world (0: DefaultFanout).
	Fanout int
	// Listener, on rank 0, is already listening at Addr (JoinOverMPI
	// picks a free port); nil: rank 0 listens on Addr itself.
	Listener net.Listener
}

type hello struct {
	Rank   int      `json:"rank"`
	Size   int      `json:"size"`
	Host   string   `json:"host"`
	PID    int      `json:"pid"`
	Args   []string `json:"args"`
	Nonce  []byte   `json:"nonce"`
	Proof  []byte   `json:"proof,omitempty"`
	Secret bool     `json:"secret"` // the newcomer has a secret
	// BeatPort is the newcomer's heartbeat port (UDP, at the address its
	// control connection comes from); 0 when it has none.
	BeatPort int `json:"beat_port,omitempty"`
	// TreePort is the port the newcomer serves its children of the
	// bootstrap tree on (TCP, at the same address); 0 when it has none.
	TreePort int `json:"tree_port,omitempty"`
}

// welcome is rank 0's answer to an admitted rank: its place in the tree.
// Parent 0 keeps the rendezvous connection as the link to rank 0; any
// other parent is reached at Addr.
type welcome struct {
	Parent     int    `json:"parent"`
	ParentHost string `json:"parent_host,omitempty"`
	Addr       string `json:"addr,omitempty"`
	Fanout     int    `json:"fanout"`
	Proof      []byte `json:"proof,omitempty"`
	BeatPort   int    `json:"beat_port,omitempty"` // rank 0's heartbeat port, when it is the parent
}

// worldMsg goes down the tree once every rank joined it.
type worldMsg struct {
	Hosts []string `json:"hosts"`
	PIDs  []int    `json:"pids"`
}

// FaultKind classifies why a world stopped.
type FaultKind string

// The kinds of fault a world reports.
const (
	// FaultDisconnected: a process's connection closed (it exited, was
	// killed, or its host failed).
	FaultDisconnected FaultKind = "disconnected"
	// FaultSilent: a process stopped answering heartbeats (stopped,
	// frozen or cut off) while its connection stayed open.
	FaultSilent FaultKind = "silent"
	// FaultFailed: a process reported an error of its own.
	FaultFailed FaultKind = "failed"
	// FaultHung: the watchdog found an operation that outlived its bound.
	FaultHung FaultKind = "hung"
	// FaultInterrupted: a process was interrupted (Ctrl-C, SIGTERM).
	FaultInterrupted FaultKind = "interrupted"
)

// maxPending bounds handshakes in progress at once; past it the oldest is
// dropped (a variable so tests can flood a smaller rendezvous).
var maxPending = 4096

// PeerError is a fault of the world, naming the rank at fault (Rank -1
// when no single rank is).
type PeerError struct {
	Kind FaultKind `json:"kind"`
	Rank int       `json:"rank"`
	Host string    `json:"host,omitempty"`
	Msg  string    `json:"msg"`
}

func (e *PeerError) Error() string { return e.Msg }

// Frame I/O.

type peer struct {
	rank int
	conn net.Conn
	w    *bufio.Writer
	wmu  sync.Mutex
	q    *queue
	sent atomic.Int64 // bytes of payload sent
}

func newPeer(rank int, c net.Conn) *peer {
	return &peer{rank: rank, conn: c, w: bufio.NewWriter(c), q: newQueue()}
}

// send writes one frame within timeout.
func (p *peer) send(typ byte, payload []byte, timeout time.Duration) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_ = p.conn.SetWriteDeadline(time.Now().Add(timeout))
	if err := writeFrameTo(p.w, typ, payload); err != nil {
		return err
	}
	p.sent.Add(int64(len(payload)))
	return p.w.Flush()
}

// TCP is a world of processes joined in a tree: every rank says hello to
// rank 0, which checks it and gives it its place; it then links to its
// parent (rank (r-1)/fanout) and serves its own children. Control messages
// travel along the tree, so no process holds more than fanout+1
// connections and rank 0's work grows linearly with the world. Every
// process watches its parent and children by heartbeat; a fault floods the
// tree, and one that goes silent is named by its neighbours.
type TCP struct {
	rank, size int
	fanout     int
	hosts      []string // every rank's host, guarded by linkMu while the world forms
	pids       []int
	localIP    string // this host's address as the other processes reach it

	linkMu   sync.Mutex
	up       *peer   // the link to the parent; nil at rank 0
	down     []*peer // the links to the children, by rank
	pendUp   [][]byte
	lostMsg  []byte       // the fault that ended the world, once known (JSON PeerError)
	treeLn   net.Listener // where the children link; closed once the world formed
	treePort int
	placed   chan struct{} // closed once this rank knows the fanout
	lostCh   chan struct{} // closed once the world is lost
	told     atomic.Int64  // children refused with the fault that ended the world
	worldCh  chan []byte   // the world message from the parent
	joinedMu sync.Mutex
	joinedQ  []int
	joinedCh chan struct{}
	// beats is the heartbeat path apart from the control connection; nil
	// where it could not be opened (the beats then ride the control
	// connection only).
	beats *beatPath

	beatEvery, silence time.Duration
	seen               []atomic.Int64 // unix nanoseconds of the last frame from each rank
	status             atomic.Value   // func() []byte
	statusMu           sync.Mutex
	peerStatus         [][]byte       // the last progress of each rank below this one
	statusAt           []atomic.Int64 // unix ns when that progress was current

	lostOnce  sync.Once
	lostErr   chan error
	closing   chan struct{}
	closeOnce sync.Once
	stopBeat  chan struct{}
	stopOnce  sync.Once
	onLost    func(error)
	mu        sync.Mutex
	waitHook  atomic.Value // func(rank int): whom a receive waits for, -1 when done
	loadNote  func(rank int, quiet time.Duration)
	// quietUntil (unix nanoseconds), for tests: this process sends no
	// heartbeat until then, as a process starved of CPU would not.
	quietUntil atomic.Int64
	noticeMu   sync.Mutex
	notices    map[string]*notice // by key: the words heard, or waited for
}

// OnWait sets a function told which process rank a receive of the control
// connection waits for before it blocks, and -1 once it has its message,
// so a watchdog can follow who waits for whom.
func (t *TCP) OnWait(f func(rank int)) { t.waitHook.Store(f) }

func (t *TCP) waiting(rank int) {
	if f, ok := t.waitHook.Load().(func(int)); ok && f != nil {
		f(rank)
	}
}

// Join forms the world: rank 0 serves the rendezvous at Addr and places
// every other rank in the bootstrap tree; the others connect, retrying
// until the timeout, then link to their parent. With a token every
// newcomer must prove it holds it, to rank 0 and to its parent; a
// connection that cannot, or that claims a taken rank or a wrong world
// size, is refused on its own and never stops the world. An error names the
// ranks that never arrived, or the rank whose arguments differ, or the
// ranks that could not join their parent.
func Join(ctx context.Context, o TCPOptions) (*TCP, error) {
	if o.Size < 2 {
		return nil, fmt.Errorf("a world of %d processes needs no rendezvous", o.Size)
	}
	if o.Rank < 0 || o.Rank >= o.Size {
		return nil, fmt.Errorf("rank %d does not fit a world of %d", o.Rank, o.Size)
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.BeatEvery <= 0 {
		o.BeatEvery = DefaultBeatEvery
	}
	if o.Silence <= 0 {
		o.Silence = DefaultSilence
	}
	if o.Silence < 2*o.BeatEvery {
		o.Silence = 2 * o.BeatEvery
	}
	if o.Fanout <= 0 {
		o.Fanout = DefaultFanout
	}
	t := &TCP{rank: o.Rank, size: o.Size, lostErr: make(chan error, 1), closing: make(chan struct{}),
		stopBeat: make(chan struct{}), beatEvery: o.BeatEvery, silence: o.Silence,
		seen: make([]atomic.Int64, o.Size), peerStatus: make([][]byte, o.Size), statusAt: make([]atomic.Int64, o.Size),
		placed: make(chan struct{}), lostCh: make(chan struct{}), worldCh: make(chan []byte, 1), joinedCh: make(chan struct{}, 1)}
	var err error
	if o.Rank == 0 {
		err = t.serve(ctx, o)
	} else {
		err = t.connect(ctx, o)
		if err != nil {
			// The children hear why before their link closes.
			pe := asPeerError(err)
			if pe == nil {
				pe = &PeerError{Kind: FaultFailed, Rank: -1, Msg: err.Error()}
			}
			t.lost(pe)
			t.linger()
		}
	}
	if err != nil {
		t.closeConns()
		return nil, err
	}
	now := time.Now().UnixNano()
	for r := range t.seen {
		t.seen[r].Store(now)
	}
	go t.beats.serve(func(r int) { t.seen[r].Store(time.Now().UnixNano()) })
	// The first beat goes before Join returns, so the watchers hear every
	// process that joined on the beat path, however loaded its machine.
	t.beats.send()
	go t.beat()
	return t, nil
}

// Rank is this process's rank.
func (t *TCP) Rank() int { return t.rank }

// Size is the number of processes.
func (t *TCP) Size() int { return t.size }

// Hosts lists each rank's host.
func (t *TCP) Hosts() []string { return t.hosts }

// PIDs lists each rank's process id.
func (t *TCP) PIDs() []int { return t.pids }

// LocalIP is the address of this host that the other processes reach it
// at: the one rank 0 serves on, or the one this rank reached rank 0 from.
func (t *TCP) LocalIP() string { return t.localIP }

// Silence is how long a process may go unheard before it is named.
func (t *TCP) Silence() time.Duration { return t.silence }

// recv waits for the next message from p. A message that arrived before the
// connection was lost is still delivered: the reader queues a peer's data
// before it reports that peer gone, so data already queued wins over the
// loss (rank 0 closes right after the final barrier's answer).
func (t *TCP) recv(p *peer) ([]byte, error) {
	if d, ok := p.q.pop(); ok {
		return d, nil
	}
	t.waiting(p.rank)
	defer t.waiting(-1)
	for {
		if d, ok := p.q.pop(); ok {
			return d, nil
		}
		select {
		case <-p.q.ready:
		case err := <-t.lostErr:
			t.lostErr <- err // keep it for the next caller
			if d, ok := p.q.pop(); ok {
				return d, nil
			}
			return nil, err
		}
	}
}

// sendData writes a data frame to p; a failure is that peer's fault.
func (t *TCP) sendData(p *peer, data []byte) error {
	if err := p.send(frameData, data, t.silence); err != nil {
		select {
		case err := <-t.lostErr:
			t.lostErr <- err
			return err
		default:
		}
		pe := &PeerError{Kind: FaultDisconnected, Rank: p.rank, Host: t.hostOf(p.rank),
			Msg: fmt.Sprintf("%s cannot be reached: %v", t.who(p.rank), err)}
		t.lost(pe)
		return pe
	}
	return nil
}

// AllGather returns every rank's data, by rank: the data is gathered up
// the tree to rank 0, and the whole list goes back down.
func (t *TCP) AllGather(data []byte) ([][]byte, error) {
	all, err := t.gatherUp(data)
	if err != nil {
		return nil, err
	}
	var enc []byte
	if t.rank == 0 {
		enc = encodeList(all)
	} else {
		if enc, err = t.recv(t.up); err != nil {
			return nil, err
		}
		if all, err = decodeList(enc); err != nil || len(all) != t.size {
			return nil, fmt.Errorf("malformed gather result from %s", t.who(t.up.rank))
		}
	}
	if err := t.sendDown(enc); err != nil {
		return nil, err
	}
	return all, nil
}

// Gather returns every rank's data, by rank, on rank 0; the others get nil.
func (t *TCP) Gather(data []byte) ([][]byte, error) {
	return t.gatherUp(data)
}

// gatherUp collects this rank's subtree, children in rank order, and
// sends it to the parent; on rank 0 it returns every rank's data.
func (t *TCP) gatherUp(data []byte) ([][]byte, error) {
	items := [][]byte{entry(t.rank, data)}
	for _, c := range t.down {
		b, err := t.recv(c)
		if err != nil {
			return nil, err
		}
		sub, err := decodeList(b)
		if err != nil {
			return nil, fmt.Errorf("malformed gather message from %s", t.who(c.rank))
		}
		items = append(items, sub...)
	}
	if t.rank != 0 {
		return nil, t.sendData(t.up, encodeList(items))
	}
	all := make([][]byte, t.size)
	got := make([]bool, t.size)
	for _, it := range items {
		r, d, ok := parseEntry(it, t.size)
		if !ok || got[r] {
			return nil, errors.New("malformed gather: a rank is missing or twice")
		}
		all[r], got[r] = d, true
	}
	if len(items) != t.size {
		return nil, fmt.Errorf("malformed gather: %d of %d ranks", len(items), t.size)
	}
	return all, nil
}

// sendDown sends enc to every child at once; the first failure is returned.
func (t *TCP) sendDown(enc []byte) error {
	if len(t.down) == 1 {
		return t.sendData(t.down[0], enc)
	}
	errs := make([]error, len(t.down))
	var wg sync.WaitGroup
	for i, c := range t.down {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = t.sendData(c, enc)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Close waits for every rank at a final barrier, then disconnects.
// Disconnects from here on are expected and reported to no one.
func (t *TCP) Close() error {
	t.closeOnce.Do(func() { close(t.closing) })
	_, err := t.AllGather(nil)
	t.closeConns()
	return err
}

func (t *TCP) closeConns() {
	t.closeOnce.Do(func() { close(t.closing) })
	t.stopOnce.Do(func() { close(t.stopBeat) })
	t.beats.close()
	t.linkMu.Lock()
	if t.treeLn != nil {
		t.treeLn.Close()
	}
	t.linkMu.Unlock()
	for _, p := range t.links() {
		p.conn.Close()
	}
}
