// Package probe is the algorithm probe: it records which algorithm,
// protocol and channels NCCL picks for every row of a run. NCCL writes its choices to its log only when
// NCCL_DEBUG=INFO, and then for every call, which would slow the timed
// loops; it reads that setting once per process. So before the sweep, a
// child process (one per rank process under a launcher) opens the same
// communicators with the log sent to a file in a private directory, issues
// every row once, and matches the log's lines to the rows. Nothing of it
// reaches the user's terminal, and a probe that fails or takes too long
// only costs the rows their algorithm.
//
// Parent and child talk over two pipes (the child's fds 3 and 4) in
// frames: a type byte, a 4-byte length, the payload. Under a launcher the
// child's control messages (the NCCL id, group ids, results) go through
// its parent, which relays them over the world's control connection; every
// relayed round carries a status byte, so when one rank's probe ends, every
// parent learns it in the same round and all leave the relay together.
package probe

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"collbench/bootstrap"
	"collbench/internal/tempdir"
	"collbench/internal/words"
	"collbench/measure"
	"collbench/results"
)

// Frame types.
const (
	frameSpec     = 'S' // parent -> child: the Spec
	frameData     = 'D' // parent -> child: a relayed round's result
	frameError    = 'E' // parent -> child: the relay failed
	frameGather   = 'A' // child -> parent: an all-gather (or a gather)
	frameGather0  = 'G' // child -> parent: a gather to rank 0
	frameAbort    = 'X' // child -> parent: the child failed
	frameClose    = 'C' // child -> parent: done
	frameResult   = 'R' // child -> parent: the Result
	frameProgress = 'P' // child -> parent: how far it got (a stage, 4 bytes)
	maxFrameBytes = 64 << 20
)

// Spec is what the probe child runs: the plan, cases and groups of the
// run, one operation per row, and where NCCL is to write its log.
type Spec struct {
	Backend string         `json:"backend"`
	Lib     string         `json:"lib,omitempty"`
	Ranks   int            `json:"ranks"` // ranks this child opens (single process)
	Multi   bool           `json:"multi,omitempty"`
	Rank    int            `json:"rank"`
	Size    int            `json:"size"`
	Hosts   []string       `json:"hosts,omitempty"`
	LocalIP string         `json:"local_ip,omitempty"`
	Device  int            `json:"device"`
	Plan    measure.Plan   `json:"plan"`
	Cases   []measure.Case `json:"cases"`
	Groups  [][]int        `json:"groups"`
	LogFile string         `json:"log_file"`
}

// Choice is one group's algorithm for one row.
type Choice struct {
	Row    int                 `json:"row"`
	Group  int                 `json:"group"`
	Choice *results.AlgoChoice `json:"choice"`
}

// Result is what the probe found.
type Result struct {
	Choices []Choice `json:"choices"`
	// Note says why some rows have no choice, "" when all do.
	Note string `json:"note,omitempty"`
}

// ByRow indexes the choices: row -> group -> choice.
func (r *Result) ByRow() map[int]map[int]*results.AlgoChoice {
	out := map[int]map[int]*results.AlgoChoice{}
	if r == nil {
		return out
	}
	for _, c := range r.Choices {
		if out[c.Row] == nil {
			out[c.Row] = map[int]*results.AlgoChoice{}
		}
		out[c.Row][c.Group] = c.Choice
	}
	return out
}

// encodeParts packs a round's parts; nil parts stay nil.
func encodeParts(parts [][]byte) []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.BigEndian, uint32(len(parts))) //nolint:gosec // G115: stages are small numbers sent as two's complement; frame lengths are bounded by maxFrameBytes
	for _, p := range parts {
		n := uint32(len(p)) //nolint:gosec // G115: stages are small numbers sent as two's complement; frame lengths are bounded by maxFrameBytes
		if p == nil {
			n = ^uint32(0)
		}
		_ = binary.Write(&b, binary.BigEndian, n)
		b.Write(p)
	}
	return b.Bytes()
}

func decodeParts(b []byte) ([][]byte, error) {
	r := bytes.NewReader(b)
	var k uint32
	if err := binary.Read(r, binary.BigEndian, &k); err != nil || int(k) > len(b) {
		return nil, fmt.Errorf("malformed relay reply")
	}
	out := make([][]byte, k)
	for i := range out {
		var n uint32
		if err := binary.Read(r, binary.BigEndian, &n); err != nil {
			return nil, fmt.Errorf("malformed relay reply")
		}
		if n == ^uint32(0) {
			continue
		}
		if int(n) > r.Len() {
			return nil, fmt.Errorf("malformed relay reply")
		}
		out[i] = make([]byte, n)
		_, _ = io.ReadFull(r, out[i])
	}
	return out, nil
}

// tailBuffer keeps the last bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 8<<10 {
		t.buf = t.buf[len(t.buf)-8<<10:]
	}
	return len(p), nil
}

// lastLine is the last non-empty line written.
func (t *tailBuffer) lastLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	return strings.TrimPrefix(strings.TrimSpace(lines[len(lines)-1]), "collbench: ")
}

// Run starts the child (exe algorithm-probe, with env), relays its
// control messages over ctl when the world spans processes (ctl nil: one
// process), and returns rank 0's result (nil on other ranks). The child is
// killed if it outlives timeout or ctx.
func Run(ctx context.Context, ctl measure.Control, exe string, env []string, spec Spec, timeout time.Duration) (*Result, error) {
	// A child that ends on its own leaves its peers waiting inside NCCL,
	// which does not notice a peer gone over NVLink or shared memory, and
	// their parents waiting for them outside any round. Its parent tells
	// every process so (a notice of the world, where the control has
	// them), and each stops its child and comes to the last round. The
	// key is taken first, so that every process numbers its probes alike.
	nt, _ := ctl.(noticer)
	key := ""
	if nt != nil {
		n, _ := noticeRuns.LoadOrStore(nt, new(atomic.Int64))
		key = fmt.Sprintf("algorithm probe %d ended", n.(*atomic.Int64).Add(1))
	}
	// timedOut tells a child stopped for its bound from one that ended on
	// its own near it (a loaded host): only the first took too long.
	// stoppedForPeer: stopped on another rank's word.
	var timedOut, stoppedForPeer atomic.Bool
	pr := &probeRun{ctl: ctl, stage: stageStarting}
	// leave ends this rank's probe on cause; own is its words for the
	// other ranks ("": the cause, at its stage). Under a launcher every
	// parent still joins the last round, whatever ended its child (a child
	// that never started, an early end, a frame it cannot read, a child
	// that stopped reading): the rounds are lock-step, and one skipped
	// leaves the next exchange of the run misread. The others are told
	// unless the child was stopped on their word, for its bound or by a
	// signal (every rank's bound or signal comes alike).
	leave := func(cause error, own string) (*Result, error) {
		if ctl == nil {
			return nil, cause
		}
		switch {
		case errors.Is(cause, errStoppedForPeer):
			own = peerEnded
		case own == "":
			own = fmt.Sprintf("rank %d: %v (%s)", ctl.Rank(), cause, describeStage(pr.stage, spec))
		}
		if nt != nil && !stoppedForPeer.Load() && !timedOut.Load() && ctx.Err() == nil {
			nt.Notice(key)
		}
		why, err := relayEnd(ctl, pr.stage, own)
		if err != nil {
			return nil, err
		}
		if why != "" {
			return nil, fmt.Errorf("the probe ended on %s", why)
		}
		return nil, cause
	}
	toChild, childIn, err := os.Pipe() // child reads toChild (fd 3)
	if err != nil {
		return leave(err, "")
	}
	fromChild, childOut, err := os.Pipe() // child writes childOut (fd 4)
	if err != nil {
		toChild.Close()
		childIn.Close()
		return leave(err, "")
	}
	defer childIn.Close()
	defer fromChild.Close()
	var tail tailBuffer
	cmd := exec.Command(exe, "algorithm-probe")
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &tail, &tail
	cmd.ExtraFiles = []*os.File{toChild, childOut}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		toChild.Close()
		childOut.Close()
		return leave(fmt.Errorf("starting it: %v", err), "")
	}
	toChild.Close()
	childOut.Close()
	exited := make(chan error, 1)
	ended := make(chan struct{})
	go func() {
		err := cmd.Wait()
		close(ended)
		exited <- err
	}()
	kill := func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Process.Kill()
		}
	}
	// An exit at once (a second signal) ends the child before the
	// directory of its NCCL log goes.
	defer tempdir.EndOnExit(kill, ended)()
	// Whatever happens, the child does not outlive the probe.
	defer func() {
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			kill()
			<-exited
		}
	}()
	stop := context.AfterFunc(ctx, kill)
	defer stop()
	if nt != nil {
		go func() {
			select {
			case <-nt.Noticed(key):
				select {
				case <-ended:
				default:
					stoppedForPeer.Store(true)
					kill()
				}
			case <-ended:
			}
		}()
	}
	timer := time.AfterFunc(timeout, func() {
		timedOut.Store(true)
		kill()
	})
	defer timer.Stop()

	childFailed := func(err error) error {
		werr := <-exited
		exited <- werr
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case stoppedForPeer.Load():
			return errStoppedForPeer
		case timedOut.Load():
			return fmt.Errorf("it took longer than %s and was stopped", timeout.Round(time.Second))
		case tail.lastLine() != "":
			return errors.New(tail.lastLine())
		case werr != nil:
			return fmt.Errorf("it ended early (%v)", werr)
		}
		return err
	}
	raw, _ := json.Marshal(spec)
	if err := bootstrap.WriteFrame(childIn, frameSpec, raw); err != nil {
		kill()
		return leave(childFailed(fmt.Errorf("sending it its work: %v", err)), "")
	}
	pr.childIn, pr.fromChild, pr.kill, pr.leave, pr.childFailed = childIn, fromChild, kill, leave, childFailed
	return pr.relay()
}

// probeRun is one rank's probe once its child runs: what relay needs of
// Run's state. stage is the child's last reported stage, which leave's
// words name.
type probeRun struct {
	ctl         measure.Control
	stage       int
	childIn     *os.File
	fromChild   *os.File
	kill        func()
	leave       func(cause error, own string) (*Result, error)
	childFailed func(error) error
}

// relay reads the child's frames until it gives its result or ends:
// progress, the result, and the rounds it asks of the world, relayed over
// the control; every way out leaves through leave or the last round.
func (pr *probeRun) relay() (*Result, error) {
	ctl, childIn, kill, leave, childFailed := pr.ctl, pr.childIn, pr.kill, pr.leave, pr.childFailed
	var result *Result
	for {
		typ, p, err := bootstrap.ReadFrame(pr.fromChild, maxFrameBytes)
		if err != nil {
			// The child ended or was killed.
			return leave(childFailed(fmt.Errorf("it ended without a result")), "")
		}
		switch typ {
		case frameProgress:
			if len(p) == 4 {
				pr.stage = int(int32(binary.BigEndian.Uint32(p))) //nolint:gosec // G115: stages are small numbers sent as two's complement; frame lengths are bounded by maxFrameBytes
			}
		case frameResult:
			result = &Result{}
			if err := json.Unmarshal(p, result); err != nil {
				kill()
				return leave(fmt.Errorf("unreadable result: %v", err), "")
			}
			if ctl == nil {
				return result, nil
			}
		case frameGather, frameGather0, frameAbort, frameClose:
			if ctl == nil {
				if typ == frameAbort {
					return nil, errors.New(string(p))
				}
				continue
			}
			if typ == frameAbort {
				return leave(errors.New(string(p)), fmt.Sprintf("rank %d: %s", ctl.Rank(), p))
			}
			if typ == frameClose {
				cause, err := relayEnd(ctl, pr.stage, "done")
				if err != nil {
					return nil, err
				}
				if cause != "" {
					return nil, fmt.Errorf("the probe ended on %s", cause)
				}
				if ctl.Rank() == 0 {
					if result == nil {
						return nil, fmt.Errorf("it ended without a result")
					}
					return result, nil
				}
				return nil, nil
			}
			parts, ended, err := relayRound(ctl, p)
			if err != nil {
				return nil, err
			}
			if ended != "" {
				_ = bootstrap.WriteFrame(childIn, frameError, []byte("the probe ended on "+ended))
				if ended == "done" {
					ended = "another rank finished first"
				}
				return nil, fmt.Errorf("the probe ended on %s", ended)
			}
			if typ == frameGather0 && ctl.Rank() != 0 {
				parts = nil
			}
			if err := bootstrap.WriteFrame(childIn, frameData, encodeParts(parts)); err != nil {
				return leave(childFailed(fmt.Errorf("it stopped reading")), "")
			}
		default:
			kill()
			return leave(fmt.Errorf("unknown message %q from it", typ), "")
		}
	}
}

// noticer is a control that can tell every process a word outside the
// lock-step rounds (bootstrap.TCP).
type noticer interface {
	Notice(key string)
	Noticed(key string) <-chan struct{}
}

// noticeRuns numbers the probes of each world (by its control, a
// comparable value such as *bootstrap.TCP): every process of a world runs
// the same probes in the same order, so the numbers agree across it.
var noticeRuns sync.Map

// errStoppedForPeer says this child was stopped because another rank's
// probe ended; peerEnded is its reason in the last round, which names no
// cause (the rank whose probe ended gives that).
var errStoppedForPeer = errors.New("stopped: another rank's probe ended")

const peerEnded = "stopped for another rank"

// relayRound relays one control round for the child: every parent
// contributes a status byte and its child's data. It returns the children's
// data, or why the probe ended somewhere ("done" when a child finished).
func relayRound(ctl measure.Control, data []byte) ([][]byte, string, error) {
	all, err := ctl.AllGather(append([]byte{0}, data...))
	if err != nil {
		return nil, "", err
	}
	parts := make([][]byte, len(all))
	ended := ""
	for r, a := range all {
		if len(a) == 0 || a[0] != 0 {
			if ended == "" {
				ended = "rank " + fmt.Sprint(r)
				if len(a) > 5 {
					ended = string(a[5:])
				}
			}
			continue
		}
		parts[r] = a[1:]
	}
	if ended == "" {
		return parts, "", nil
	}
	// The rank whose probe ended says why in this same round; the ranks
	// stopped on its word do not.
	if cause := endCause(all); cause != "" {
		return nil, cause, nil
	}
	if ended == peerEnded {
		ended = "another rank's probe ending"
	}
	return nil, ended, nil
}

// Probe stages: before the communicators are open, open but before the
// first row, then the row being issued (0, 1, ...).
const (
	stageStarting = -2
	stageOpen     = -1
)

func describeStage(stage int, spec Spec) string {
	switch stage {
	case stageStarting:
		return "while opening its communicators"
	case stageOpen:
		return "before its first operation"
	}
	total := len(spec.Cases) * len(spec.Plan.Sizes)
	if len(spec.Plan.Sizes) == 0 || stage >= total {
		return fmt.Sprintf("at row %d", stage+1)
	}
	c := spec.Cases[stage/len(spec.Plan.Sizes)]
	return fmt.Sprintf("at row %d of %d, %s %s", stage+1, total, c.Coll, words.BytesApprox(spec.Plan.Sizes[stage%len(spec.Plan.Sizes)]))
}

// relayEnd is this parent's last round: its child ended at stage, for why.
// It returns the probe's cause across the world: the first rank whose child
// ended for a reason of its own; if every child was stopped for taking too
// long, the one that got least far (the others were waiting for it).
func relayEnd(ctl measure.Control, stage int, why string) (string, error) {
	msg := make([]byte, 5, 5+len(why))
	msg[0] = 1
	binary.BigEndian.PutUint32(msg[1:], uint32(int32(stage))) //nolint:gosec // G115: stages are small numbers sent as two's complement; frame lengths are bounded by maxFrameBytes
	all, err := ctl.AllGather(append(msg, why...))
	if err != nil {
		return "", err
	}
	return endCause(all), nil
}

// endCause is the probe's cause across the world from a round's last
// words (status 1): the first rank whose child ended for a reason of its
// own; if every child was stopped for taking too long, the one that got
// least far (the others were waiting for it); "" if every child finished
// or was stopped on another's word.
func endCause(all [][]byte) string {
	own, slowest, least := "", "", 0
	for _, a := range all {
		if len(a) < 5 || a[0] != 1 {
			continue
		}
		st, w := int(int32(binary.BigEndian.Uint32(a[1:5]))), string(a[5:]) //nolint:gosec // G115: stages are small numbers sent as two's complement; frame lengths are bounded by maxFrameBytes
		if w == "done" || w == peerEnded {
			continue
		}
		if !strings.Contains(w, "took longer") {
			if own == "" {
				own = w
			}
			continue
		}
		if slowest == "" || st < least {
			slowest, least = w, st
		}
	}
	if own != "" {
		return own
	}
	return slowest
}
