package bootstrap

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"collbench/internal/secret"
	"collbench/internal/words"
)

// parentOf is rank r's parent in a tree of the given fanout.
func parentOf(r, fanout int) int { return (r - 1) / fanout }

// childrenOf lists rank r's children in a world of size.
func childrenOf(r, fanout, size int) []int {
	var out []int
	for c := r*fanout + 1; c <= r*fanout+fanout && c < size; c++ {
		out = append(out, c)
	}
	return out
}

// entry is one rank's data in a gather message: the rank, then the data.
func entry(rank int, data []byte) []byte {
	out := make([]byte, 4, 4+len(data))
	binary.LittleEndian.PutUint32(out, uint32(rank)) //nolint:gosec // G115: a rank, far below 2^31
	return append(out, data...)
}

func parseEntry(b []byte, size int) (int, []byte, bool) {
	if len(b) < 4 {
		return 0, nil, false
	}
	r := int(binary.LittleEndian.Uint32(b))
	if r < 0 || r >= size {
		return 0, nil, false
	}
	return r, b[4:], true
}

// links lists this process's parent and children.
func (t *TCP) links() []*peer {
	t.linkMu.Lock()
	defer t.linkMu.Unlock()
	out := make([]*peer, 0, len(t.down)+1)
	if t.up != nil {
		out = append(out, t.up)
	}
	return append(out, t.down...)
}

// hostOf is rank r's host, "" while it is not known here.
func (t *TCP) hostOf(r int) string {
	t.linkMu.Lock()
	defer t.linkMu.Unlock()
	if r >= 0 && r < len(t.hosts) {
		return t.hosts[r]
	}
	return ""
}

// who names a rank with its host and process id.
func (t *TCP) who(r int) string {
	t.linkMu.Lock()
	defer t.linkMu.Unlock()
	if r < 0 || r >= len(t.hosts) || t.hosts[r] == "" {
		return fmt.Sprintf("rank %d", r)
	}
	if r < len(t.pids) && t.pids[r] > 0 {
		return fmt.Sprintf("rank %d (%s, pid %d)", r, t.hosts[r], t.pids[r])
	}
	return fmt.Sprintf("rank %d (%s)", r, t.hosts[r])
}

// sendUp sends a frame to the parent, or keeps it until this rank has
// linked to its parent. A failed send shows up as a lost link.
func (t *TCP) sendUp(typ byte, payload []byte) {
	t.linkMu.Lock()
	up := t.up
	if up == nil {
		t.pendUp = append(t.pendUp, payload)
	}
	t.linkMu.Unlock()
	if up != nil {
		_ = up.send(typ, payload, t.silence)
	}
}

// setUp links this rank to its parent and sends what waited for the link
// (the ranks that joined below it meanwhile).
func (t *TCP) setUp(p *peer) {
	t.linkMu.Lock()
	t.up = p
	pend := t.pendUp
	t.pendUp = nil
	t.linkMu.Unlock()
	for _, b := range pend {
		_ = p.send(frameJoined, b, t.silence)
	}
}

func encodeRanks(rs []int) []byte {
	out := make([]byte, 0, 4*len(rs))
	for _, r := range rs {
		out = binary.LittleEndian.AppendUint32(out, uint32(r)) //nolint:gosec // G115: a rank, far below 2^31
	}
	return out
}

func decodeRanks(b []byte) []int {
	out := make([]int, 0, len(b)/4)
	for len(b) >= 4 {
		out = append(out, int(binary.LittleEndian.Uint32(b)))
		b = b[4:]
	}
	return out
}

// joined records, on rank 0, ranks that linked into the tree.
func (t *TCP) joined(rs []int) {
	t.joinedMu.Lock()
	t.joinedQ = append(t.joinedQ, rs...)
	t.joinedMu.Unlock()
	select {
	case t.joinedCh <- struct{}{}:
	default:
	}
}

func (t *TCP) takeJoined() []int {
	t.joinedMu.Lock()
	defer t.joinedMu.Unlock()
	q := t.joinedQ
	t.joinedQ = nil
	return q
}

// addDown adds a child link, kept in rank order, and starts reading it. A
// child that links after the world was lost is told at once.
func (t *TCP) addDown(p *peer) {
	t.linkMu.Lock()
	i, _ := slices.BinarySearchFunc(t.down, p.rank, func(x *peer, r int) int { return x.rank - r })
	t.down = slices.Insert(t.down, i, p)
	lost := t.lostMsg
	t.linkMu.Unlock()
	go t.read(p)
	if lost != nil {
		_ = p.send(frameAbort, lost, 2*time.Second)
	}
}

// treeHello is a child's hello to its parent.
type treeHello struct {
	Rank     int    `json:"rank"`
	Size     int    `json:"size"`
	Nonce    []byte `json:"nonce"`
	Proof    []byte `json:"proof,omitempty"`
	BeatPort int    `json:"beat_port,omitempty"`
}

// linkAnswer is a parent's answer to its child's hello.
type linkAnswer struct {
	Proof    []byte `json:"proof,omitempty"`
	BeatPort int    `json:"beat_port,omitempty"`
}

// openTree opens the port this rank serves its children on and accepts
// them until the world forms.
func (t *TCP) openTree(ip string, o TCPOptions, deadline time.Time) int {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0 // rank 0 refuses a rank with children and no port, and says why
	}
	t.linkMu.Lock()
	t.treeLn = ln
	t.linkMu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go t.linkChild(c, o, deadline)
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// closeTree stops accepting children.
func (t *TCP) closeTree() {
	t.linkMu.Lock()
	defer t.linkMu.Unlock()
	if t.treeLn != nil {
		t.treeLn.Close()
		t.treeLn = nil
	}
}

// linkChild checks a child's hello and links it.
func (t *TCP) linkChild(c net.Conn, o TCPOptions, deadline time.Time) {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	nonce := secret.Nonce()
	if err := writeFrameTo(c, frameChallenge, nonce); err != nil {
		c.Close()
		return
	}
	typ, payload, err := readFrame(c, maxHello)
	var h treeHello
	if err != nil || typ != frameTreeHello || json.Unmarshal(payload, &h) != nil {
		c.Close()
		return
	}
	me := fmt.Sprintf("rank %d", t.rank)
	if o.Token != nil && !secret.Verify(o.Token, h.Proof, "collbench/tree-hello", nonce, h.Nonce, h.Rank, h.Size) {
		refuse(c, fmt.Sprintf("refused by %s: wrong or no job secret", me))
		return
	}
	if h.Size != o.Size {
		refuse(c, fmt.Sprintf("refused by %s: rank %d was started for a world of %d processes, this one is of %d", me, h.Rank, h.Size, o.Size))
		return
	}
	// The fanout comes with this rank's own place, which may come after a
	// child's: a child is sent here once rank 0 has this rank's hello.
	_ = c.SetDeadline(deadline.Add(5 * time.Second))
	select {
	case <-t.placed:
	case <-t.lostCh:
	case <-t.closing:
		c.Close()
		return
	case <-time.After(time.Until(deadline)):
		c.Close()
		return
	}
	t.linkMu.Lock()
	lost := t.lostMsg
	taken := slices.ContainsFunc(t.down, func(p *peer) bool { return p.rank == h.Rank })
	t.linkMu.Unlock()
	switch {
	case lost != nil:
		var pe PeerError
		_ = json.Unmarshal(lost, &pe)
		refuse(c, pe.Msg)
		t.told.Add(1)
		return
	case h.Rank <= t.rank || h.Rank >= o.Size || parentOf(h.Rank, t.fanout) != t.rank:
		refuse(c, fmt.Sprintf("refused by %s: rank %d is not its child in the bootstrap tree", me, h.Rank))
		return
	case taken:
		refuse(c, fmt.Sprintf("refused by %s: its child rank %d has already joined", me, h.Rank))
		return
	}
	a := linkAnswer{BeatPort: t.beats.port()}
	if o.Token != nil {
		a.Proof = secret.Proof(o.Token, "collbench/tree-welcome", h.Nonce, nonce, h.Rank, h.Size)
	}
	b, _ := json.Marshal(a)
	if err := writeFrameTo(c, frameWelcome, b); err != nil {
		c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	t.beats.watch(h.Rank, c.RemoteAddr(), h.BeatPort)
	t.addDown(newPeer(h.Rank, c))
	t.sendUp(frameJoined, encodeRanks([]int{h.Rank}))
}

// linkParent dials this rank's parent, proves this rank holds the secret,
// checks the parent does, and returns the link and the parent's beat port.
func (t *TCP) linkParent(o TCPOptions, w welcome, deadline time.Time) (net.Conn, int, error) {
	name := fmt.Sprintf("rank %d", w.Parent)
	if w.ParentHost != "" {
		name += " (" + w.ParentHost + ")"
	}
	var lastErr error
	for attempt := 0; attempt < 3 && time.Now().Before(deadline); attempt++ {
		if attempt > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		c, err := net.DialTimeout("tcp", w.Addr, handshakeTimeout)
		if err != nil {
			lastErr = err
			continue
		}
		_ = c.SetDeadline(deadline.Add(5 * time.Second))
		typ, challenge, err := readFrame(c, maxHello)
		if err != nil || typ != frameChallenge || len(challenge) != secret.NonceSize {
			c.Close()
			lastErr = fmt.Errorf("no greeting (%v)", err)
			continue
		}
		h := treeHello{Rank: o.Rank, Size: o.Size, Nonce: secret.Nonce(), BeatPort: t.beats.port()}
		if o.Token != nil {
			h.Proof = secret.Proof(o.Token, "collbench/tree-hello", challenge, h.Nonce, o.Rank, o.Size)
		}
		hb, _ := json.Marshal(h)
		if err := writeFrameTo(c, frameTreeHello, hb); err != nil {
			c.Close()
			lastErr = err
			continue
		}
		typ, payload, err := readFrame(c, maxFrame)
		if err != nil {
			c.Close()
			lastErr = err
			continue
		}
		if typ == frameError {
			c.Close()
			return nil, 0, fmt.Errorf("rank %d could not join its parent %s: %s", o.Rank, name, payload)
		}
		var a linkAnswer
		if typ != frameWelcome || json.Unmarshal(payload, &a) != nil {
			c.Close()
			return nil, 0, fmt.Errorf("rank %d: unexpected answer from its parent %s at %s", o.Rank, name, w.Addr)
		}
		if o.Token != nil && !secret.Verify(o.Token, a.Proof, "collbench/tree-welcome", h.Nonce, challenge, o.Rank, o.Size) {
			c.Close()
			return nil, 0, fmt.Errorf("rank %d: the process at %s does not hold this job's secret; it is not this job's %s", o.Rank, w.Addr, name)
		}
		_ = c.SetDeadline(time.Time{})
		return c, a.BeatPort, nil
	}
	return nil, 0, fmt.Errorf("rank %d cannot reach its parent in the bootstrap tree, %s at %s: %v (check that the hosts of this job can reach each other)",
		o.Rank, name, w.Addr, lastErr)
}

// unlinked names, for rank 0's timeout, the ranks that arrived but never
// joined the tree whose parents did: the parents are where it broke.
func (t *TCP) unlinked(linked []bool) string {
	byParent := map[int][]int{}
	var parents []int
	for r := 1; r < len(linked); r++ {
		p := parentOf(r, t.fanout)
		if !linked[r] && (p == 0 || linked[p]) {
			if byParent[p] == nil {
				parents = append(parents, p)
			}
			byParent[p] = append(byParent[p], r)
		}
	}
	var parts []string
	for i, p := range parents {
		if i == 4 {
			parts = append(parts, fmt.Sprintf("and under %d more parents", len(parents)-4))
			break
		}
		parts = append(parts, fmt.Sprintf("ranks %s under their parent %s", words.Ints(byParent[p]), t.who(p)))
	}
	return strings.Join(parts, "; ")
}

// takeStatus keeps the progress a child's beat carries for its subtree.
func (t *TCP) takeStatus(b []byte) {
	items, err := decodeList(b)
	if err != nil {
		return
	}
	now := time.Now()
	t.statusMu.Lock()
	defer t.statusMu.Unlock()
	for _, it := range items {
		if len(it) < 8 {
			continue
		}
		r := int(binary.LittleEndian.Uint32(it))
		age := time.Duration(binary.LittleEndian.Uint32(it[4:])) * time.Millisecond
		if r <= t.rank || r >= t.size {
			continue
		}
		t.peerStatus[r] = it[8:]
		t.statusAt[r].Store(now.Add(-age).UnixNano())
	}
}

// bundle is what this rank's beat carries up: its own progress and the
// latest of every rank below it, each with its age.
func (t *TCP) bundle(own []byte) []byte {
	now := time.Now()
	one := func(r int, age time.Duration, p []byte) []byte {
		b := make([]byte, 8, 8+len(p))
		binary.LittleEndian.PutUint32(b, uint32(r))                                  //nolint:gosec // G115: a rank, far below 2^31
		binary.LittleEndian.PutUint32(b[4:], uint32(min(age.Milliseconds(), 1<<31))) //nolint:gosec // G115: bounded just here
		return append(b, p...)
	}
	items := [][]byte{one(t.rank, 0, own)}
	if len(t.down) > 0 {
		t.statusMu.Lock()
		for r := t.rank + 1; r < t.size; r++ {
			if at := t.statusAt[r].Load(); at != 0 {
				items = append(items, one(r, max(0, now.Sub(time.Unix(0, at))), t.peerStatus[r]))
			}
		}
		t.statusMu.Unlock()
	}
	return encodeList(items)
}

// lingerFor bounds how long a rank whose world failed to form still tells
// its children why.
const lingerFor = 5 * time.Second

// linger keeps this rank's port for its children open a few seconds after
// the world failed to form, so a child sent here before the failure hears
// why rather than a refused connection; it returns once every child of
// this rank has been told.
func (t *TCP) linger() {
	t.linkMu.Lock()
	ln := t.treeLn
	t.linkMu.Unlock()
	if ln == nil {
		return
	}
	expected := -1 // unknown before this rank had its place
	select {
	case <-t.placed:
		expected = len(childrenOf(t.rank, t.fanout, t.size))
	default:
	}
	for end := time.Now().Add(lingerFor); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		t.linkMu.Lock()
		n := len(t.down)
		t.linkMu.Unlock()
		if expected >= 0 && n+int(t.told.Load()) >= expected {
			return
		}
	}
}
