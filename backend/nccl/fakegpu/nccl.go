package fakegpu

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"collbench/backend/nccl/driver"
	"collbench/cuda"
)

// LoadNCCL "loads" the machine's NCCL from the first candidate.
func (d *Driver) LoadNCCL(cands []driver.Candidate) (driver.Library, error) {
	if err := d.failNow("dlopen", -1); err != nil {
		return driver.Library{}, fmt.Errorf("libnccl not found; looked in: the fake machine (%v)", err)
	}
	lib := driver.Library{Path: "libnccl.so.2", Source: "fake machine", Version: d.opts.NCCLVersion, Features: d.features()}
	if len(cands) > 0 {
		lib.Path, lib.Source = cands[0].Path, cands[0].Source
	}
	return lib, nil
}

// NewUniqueID is a fresh communicator id.
func (d *Driver) NewUniqueID() (driver.UniqueID, error) {
	if err := d.failNow("ncclGetUniqueId", -1); err != nil {
		return driver.UniqueID{}, err
	}
	return newID(), nil
}

// GroupStart opens an NCCL group.
func (d *Driver) GroupStart() error {
	d.cross("GroupStart")
	return d.groupStart()
}

func (d *Driver) groupStart() error {
	d.mu.Lock()
	d.depth++
	d.mu.Unlock()
	return nil
}

// GroupEnd closes the innermost NCCL group.
func (d *Driver) GroupEnd() error {
	d.cross("GroupEnd")
	return d.groupEnd()
}

func (d *Driver) groupEnd() error {
	d.mu.Lock()
	if d.depth == 0 {
		d.mu.Unlock()
		return ncclErr("ncclGroupEnd", driver.InvalidUsage, "ncclGroupEnd without ncclGroupStart")
	}
	d.depth--
	d.mu.Unlock()
	return d.failNow("ncclGroupEnd", -1)
}

// MemAlloc allocates registrable memory on the current GPU.
func (d *Driver) MemAlloc(bytes int64) (cuda.DevPtr, error) {
	return d.allocate("ncclMemAlloc", bytes, true)
}

// MemFree frees memory from MemAlloc.
func (d *Driver) MemFree(p cuda.DevPtr) error { return d.free("ncclMemFree", p, true) }

// clique is one communicator: its ranks meet in it.
type clique struct {
	d       *Driver
	n       int
	mu      sync.Mutex
	cond    *sync.Cond
	members []*comm
	meets   map[string]*meeting  // calls every rank makes, by kind and number
	mail    map[[2]int][]message // sends waiting for their receive, by (from, to)
	aborted string               // why, once a member aborted
	serial  int64                // the communicator's number, from 0, in the machine
}

func newClique(d *Driver, n int) *clique {
	cl := &clique{d: d, n: n, members: make([]*comm, n), meets: map[string]*meeting{}, mail: map[[2]int][]message{},
		serial: d.serials.Add(1) - 1}
	cl.cond = sync.NewCond(&cl.mu)
	return cl
}

// meeting gathers one value per rank; the last to arrive runs its work.
type meeting struct {
	vals    []any
	arrived int
	left    int
	done    bool
	err     error
	out     []any
}

// wait blocks (cl.mu held) until ok, an abort or the machine's timeout;
// it says which ended it.
func (cl *clique) wait(ok func() bool) (aborted, expired bool) {
	t := time.AfterFunc(cl.d.opts.Timeout, func() {
		cl.mu.Lock()
		expired = true
		cl.cond.Broadcast()
		cl.mu.Unlock()
	})
	defer t.Stop()
	for !ok() && cl.aborted == "" && !expired {
		cl.cond.Wait()
	}
	return cl.aborted != "" && !ok(), expired && !ok()
}

// meet is a blocking collective call: every rank gives v, the last one to
// arrive runs work over all of them, and each gets its own result.
// cl.mu is held.
func (cl *clique) meet(key string, rank int, v any, work func(vals []any) ([]any, error)) (any, error) {
	m := cl.meets[key]
	if m == nil {
		m = &meeting{vals: make([]any, cl.n)}
		cl.meets[key] = m
	}
	m.vals[rank] = v
	if m.arrived++; m.arrived == cl.n {
		m.out, m.err = work(m.vals)
		m.done = true
		cl.cond.Broadcast()
	}
	aborted, expired := cl.wait(func() bool { return m.done })
	var out any
	var err error
	switch {
	case aborted:
		err = fmt.Errorf("%s", cl.aborted)
	case expired:
		err = fmt.Errorf("rank %d waited %v for ranks %v", rank, cl.d.opts.Timeout, missing(m.vals))
	default:
		err = m.err
		if m.out != nil {
			out = m.out[rank]
		}
	}
	if m.left++; m.left == cl.n || !m.done {
		delete(cl.meets, key)
	}
	return out, err
}

func missing(vals []any) []int {
	var out []int
	for i, v := range vals {
		if v == nil {
			out = append(out, i)
		}
	}
	return out
}

func (cl *clique) abort(why string) {
	cl.mu.Lock()
	if cl.aborted == "" {
		cl.aborted = why
	}
	cl.cond.Broadcast()
	cl.mu.Unlock()
}

// comm is one rank of a clique, on one GPU.
type comm struct {
	d         *Driver
	cl        *clique
	rank, dev int
	meetSeq   map[string]uint64
	async     error
	destroyed bool
	aborted   bool
	profCtx   unsafe.Pointer // the profiler plugin's context, nil without one
	tunerCtx  unsafe.Pointer // the tuner plugin's context, nil without one
	// profSeq numbers each function's calls apart, as NCCL's seqNumber
	// does (the first allreduce and the first allgather are both 0).
	profSeq map[driver.OpKind]uint64
	// collectives counts the collectives issued on the communicator
	// (Model.ColdOps).
	collectives int
	// lastCount is the count of the communicator's previous collective
	// (Options.OrderByPast).
	lastCount int64
	// reductions counts the communicator's collectives (Options.OrderByRun).
	reductions int64
	// wedged is set once the profiler stall (Options.ProfilerStall) left
	// the proxy thread stuck: destroy then waits for an abort.
	wedged atomic.Bool
}

// InitRank joins the communicator id as rank of n, on the current GPU.
func (d *Driver) InitRank(n int, id driver.UniqueID, rank int) (driver.Comm, error) {
	c, err := d.ctx("ncclCommInitRank")
	if err != nil {
		return nil, ncclErr("ncclCommInitRank", driver.UnhandledCudaError, err.Error())
	}
	if err := d.failNow("ncclCommInitRank", c.dev); err != nil {
		return nil, err
	}
	if n < 1 || rank < 0 || rank >= n {
		return nil, ncclErr("ncclCommInitRank", driver.InvalidArgument, fmt.Sprintf("rank %d of %d", rank, n))
	}
	d.mu.Lock()
	cl := d.cliques[id]
	if cl == nil {
		cl = newClique(d, n)
		d.cliques[id] = cl
	}
	d.mu.Unlock()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	switch {
	case cl.n != n:
		return nil, ncclErr("ncclCommInitRank", driver.InvalidArgument, fmt.Sprintf("rank %d joins a communicator of %d ranks as one of %d", rank, cl.n, n))
	case cl.members[rank] != nil:
		return nil, ncclErr("ncclCommInitRank", driver.InvalidUsage, fmt.Sprintf("rank %d joined twice", rank))
	}
	for _, m := range cl.members {
		if m != nil && m.dev == c.dev {
			return nil, ncclErr("ncclCommInitRank", driver.InvalidUsage, fmt.Sprintf("Duplicate GPU detected: rank %d and rank %d both on GPU %d", m.rank, rank, c.dev))
		}
	}
	cm := &comm{d: d, cl: cl, rank: rank, dev: c.dev, meetSeq: map[string]uint64{}}
	cl.members[rank] = cm
	cm.profInit()
	cm.tunerInit()
	return cm, nil
}

// usable says why the communicator can no longer be called, or nil.
func (c *comm) usable(call string) error {
	c.cl.mu.Lock()
	defer c.cl.mu.Unlock()
	switch {
	case c.destroyed:
		return ncclErr(call, driver.InvalidUsage, "the communicator was destroyed")
	case c.aborted:
		return ncclErr(call, driver.InvalidUsage, "the communicator was aborted")
	}
	return nil
}

func (c *comm) Destroy() error {
	if err := c.usable("ncclCommDestroy"); err != nil {
		return err
	}
	if err := c.d.failNow("ncclCommDestroy", c.dev); err != nil {
		return err
	}
	if c.wedged.Load() {
		// ncclCommDestroy waits for the proxy thread, which waits for
		// events that never end.
		if err := c.d.hang("ncclCommDestroy", c.dev); err != nil {
			return err
		}
	}
	c.cl.mu.Lock()
	c.destroyed = true
	c.cl.mu.Unlock()
	c.profFinalize()
	c.tunerFinalize()
	return nil
}

func (c *comm) Abort() error {
	if err := c.d.failNow("ncclCommAbort", c.dev); err != nil {
		return err
	}
	c.cl.mu.Lock()
	c.aborted = true
	c.cl.mu.Unlock()
	c.cl.abort(fmt.Sprintf("rank %d aborted the communicator", c.rank))
	c.d.abortOnce.Do(func() { close(c.d.anyAbort) })
	return nil
}

func (c *comm) AsyncError() error {
	c.cl.mu.Lock()
	defer c.cl.mu.Unlock()
	return c.async
}

// fail records an asynchronous error, as NCCL's proxy thread would.
func (c *comm) fail(code int, detail string) {
	c.cl.mu.Lock()
	c.failLocked(code, detail)
	c.cl.mu.Unlock()
}

func (c *comm) Count() (int, error) {
	if err := c.usable("ncclCommCount"); err != nil {
		return 0, err
	}
	return c.cl.n, nil
}

type splitArg struct{ color, key int }

// Split is ncclCommSplit: ranks of one color form a communicator, ordered
// by key, then by their rank here.
func (c *comm) Split(color, key int) (driver.Comm, error) {
	if err := c.usable("ncclCommSplit"); err != nil {
		return nil, err
	}
	if err := c.d.failNow("ncclCommSplit", c.dev); err != nil {
		return nil, err
	}
	out, err := c.blocking("split", splitArg{color, key}, func(vals []any) ([]any, error) {
		byColor := map[int][]int{}
		for r, v := range vals {
			a := v.(splitArg)
			if a.color >= 0 {
				byColor[a.color] = append(byColor[a.color], r)
			}
		}
		res := make([]any, len(vals))
		for _, rs := range byColor {
			sort.SliceStable(rs, func(i, j int) bool { return vals[rs[i]].(splitArg).key < vals[rs[j]].(splitArg).key })
			cl := newClique(c.d, len(rs))
			for i, r := range rs {
				m := &comm{d: c.d, cl: cl, rank: i, dev: c.cl.members[r].dev, meetSeq: map[string]uint64{}}
				m.profInit()
				m.tunerInit()
				cl.members[i] = m
				res[r] = m
			}
		}
		return res, nil
	})
	if err != nil {
		return nil, ncclErr("ncclCommSplit", driver.RemoteError, err.Error())
	}
	if out == nil {
		return nil, nil // NCCL_SPLIT_NOCOLOR
	}
	return out.(*comm), nil
}

// blocking runs the communicator's next call of kind that every rank
// makes (a split, a window, a collective).
func (c *comm) blocking(kind string, v any, work func([]any) ([]any, error)) (any, error) {
	c.cl.mu.Lock()
	defer c.cl.mu.Unlock()
	seq := c.meetSeq[kind]
	c.meetSeq[kind] = seq + 1
	return c.cl.meet(fmt.Sprintf("%s#%d", kind, seq), c.rank, v, work)
}

// registration is a buffer registered with a communicator.
type registration struct {
	c      *comm
	a      *allocation
	window bool
	done   bool
}

// Register registers bytes at p with the communicator; a symmetric window
// is a collective call, every rank with the same size, on ncclMemAlloc
// memory.
func (c *comm) Register(p cuda.DevPtr, bytes int64, symmetric bool) (driver.Registration, error) {
	call := "ncclCommRegister"
	if symmetric {
		call = "ncclCommWindowRegister"
	}
	if err := c.usable(call); err != nil {
		return nil, err
	}
	if err := c.d.failNow(call, c.dev); err != nil {
		return nil, err
	}
	c.d.mu.Lock()
	a := c.d.mem.find(p)
	c.d.mu.Unlock()
	switch {
	case a == nil || int64(p-a.base)+bytes > int64(len(a.buf)): //nolint:gosec // G115: an offset inside an allocation
		return nil, ncclErr(call, driver.InvalidArgument, fmt.Sprintf("%d bytes at %#x are not device memory", bytes, uint64(p)))
	case a.dev != c.dev:
		return nil, ncclErr(call, driver.InvalidArgument, fmt.Sprintf("the buffer is on GPU %d, the communicator's rank on GPU %d", a.dev, c.dev))
	case symmetric && !a.nccl:
		return nil, ncclErr(call, driver.InvalidArgument, "a symmetric window needs memory from ncclMemAlloc")
	}
	if symmetric {
		_, err := c.blocking("window", bytes, func(vals []any) ([]any, error) {
			for r, v := range vals {
				if v.(int64) != vals[0].(int64) {
					return nil, fmt.Errorf("rank %d registers %d bytes, rank 0 %d: a symmetric window has one size", r, v, vals[0])
				}
			}
			return nil, nil
		})
		if err != nil {
			return nil, ncclErr(call, driver.InvalidUsage, err.Error())
		}
	}
	c.d.mu.Lock()
	a.regs++
	c.d.mu.Unlock()
	return &registration{c: c, a: a, window: symmetric}, nil
}

func (c *comm) Deregister(r driver.Registration) error {
	reg, ok := r.(*registration)
	call := "ncclCommDeregister"
	if ok && reg.window {
		call = "ncclCommWindowDeregister"
	}
	switch {
	case !ok || reg.c != c:
		return ncclErr(call, driver.InvalidArgument, "not a registration of this communicator")
	case reg.done:
		return ncclErr(call, driver.InvalidUsage, "deregistered twice")
	}
	if err := c.usable(call); err != nil {
		return err
	}
	c.d.mu.Lock()
	reg.done = true
	reg.a.regs--
	c.d.mu.Unlock()
	return nil
}

// streamFor is the stream h, which must be on the communicator's GPU.
func (c *comm) streamFor(call string, h cuda.Stream) (*stream, error) {
	s, err := lookup[stream](c.d, call, unsafe.Pointer(h))
	if err != nil {
		return nil, ncclErr(call, driver.UnhandledCudaError, err.Error())
	}
	if s.dev != c.dev {
		return nil, ncclErr(call, driver.InvalidUsage, fmt.Sprintf("the stream is on GPU %d, rank %d of the communicator on GPU %d", s.dev, c.rank, c.dev))
	}
	return s, nil
}
