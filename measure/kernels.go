package measure

import "collbench/results"

// record runs fn, which issues operations, with the library's recorder on
// if on; either way fn runs once.
func (rn *Runner) record(on bool, fn func() error) ([]*results.OpRecord, string, error) {
	if !on {
		return nil, "", fn()
	}
	return rn.rec.Record(fn)
}

// recording says whether the row of c at size is recorded: the world
// records, still (a library can stop recording partway), and can record
// this operation. Why not is noted once.
func (rn *Runner) recording(c Case, size int64) bool {
	if rn.rec == nil || rn.Plan.NoRecord {
		return false
	}
	if on, why := rn.rec.Recording(); !on {
		rn.note(why)
		rn.rec = nil
		return false
	}
	if why := rn.rec.Recordable(c.Coll, size); why != "" {
		rn.note(why)
		return false
	}
	return true
}

// kernelTimes puts the members' recorded operations together: their kernel
// times, starts after the earliest, channels and network steps, and the
// group's algorithm (its first member's that has one). Both are nil when no
// member recorded anything.
func kernelTimes(all []rankResult, members []int, clocks map[int]clockBound) (*results.KernelTimes, *results.AlgoChoice) {
	var algo *results.AlgoChoice
	have, net := false, false
	for _, wr := range members {
		rec := all[wr].Rec
		if rec == nil {
			continue
		}
		if algo == nil && rec.Algorithm != nil {
			algo = rec.Algorithm
		}
		have = have || rec.Channels > 0
		net = net || len(rec.Net) > 0
	}
	if !have {
		return nil, algo
	}
	k := &results.KernelTimes{Source: "NCCL profiler plugin"}
	for _, wr := range members {
		rec := all[wr].Rec
		if rec == nil || rec.Channels == 0 || rec.StopNS < rec.StartNS {
			k.DurationUS = append(k.DurationUS, -1)
			k.StartUS = append(k.StartUS, -1)
			k.Channels = append(k.Channels, 0)
		} else {
			k.DurationUS = append(k.DurationUS, float64(rec.StopNS-rec.StartNS)/1e3)
			k.StartUS = append(k.StartUS, -1)
			k.Channels = append(k.Channels, rec.Channels)
		}
		if net {
			var steps []results.NetSteps
			if rec != nil {
				steps = rec.Net
			}
			k.Net = append(k.Net, steps)
		}
	}
	alignStarts(k, all, members, clocks)
	enqueues(k, all, members)
	return k, algo
}

// clockBound is what is known of one rank's GPU timer: its offset from
// the host's clock (host minus GPU, ns) lies in [lo, hi]; clock names the
// host clock.
type clockBound struct {
	lo, hi int64
	clock  string
}

// narrowClocks intersects each rank's clock bounds with those its latest
// record shows. A record that does not overlap what is known (the timers
// drifted apart) starts the bounds anew from itself.
func (rn *Runner) narrowClocks(all []rankResult) {
	for wr, rr := range all {
		rec := rr.Rec
		if rec == nil || rec.Clock == "" || rec.ClockLoNS > rec.ClockHiNS {
			continue
		}
		if rn.clocks == nil {
			rn.clocks = map[int]clockBound{}
		}
		b, ok := rn.clocks[wr]
		nb := clockBound{lo: max(b.lo, rec.ClockLoNS), hi: min(b.hi, rec.ClockHiNS), clock: rec.Clock}
		if !ok || b.clock != rec.Clock || nb.lo > nb.hi {
			nb = clockBound{lo: rec.ClockLoNS, hi: rec.ClockHiNS, clock: rec.Clock}
		}
		rn.clocks[wr] = nb
	}
}

// alignStarts sets k's starts on the host's clock, each rank's GPU timer
// moved by the middle of its offset bounds, with half their width as the
// error. Where a member's timer has no bounds, or the members' host
// clocks differ (ranks on several hosts), the starts stay unknown (-1).
func alignStarts(k *results.KernelTimes, all []rankResult, members []int, clocks map[int]clockBound) {
	host := make([]float64, len(members))
	known := make([]bool, len(members)) // the member recorded a start
	errs := make([]float64, len(members))
	clock := ""
	first, have := 0.0, false
	for i, wr := range members {
		rec := all[wr].Rec
		if rec == nil || rec.Channels == 0 {
			continue
		}
		known[i] = true
		b, ok := clocks[wr]
		if !ok || (clock != "" && b.clock != clock) {
			return
		}
		clock = b.clock
		host[i] = float64(rec.StartNS) + (float64(b.lo)+float64(b.hi))/2
		errs[i] = float64(b.hi-b.lo) / 2 / 1e3
		if !have || host[i] < first {
			first, have = host[i], true
		}
	}
	if !have {
		return
	}
	for i := range members {
		if known[i] {
			k.StartUS[i] = (host[i] - first) / 1e3
		}
	}
	k.ClockErrorUS = errs
}

// enqueues sets k's calls of the operation after the earliest member's,
// where every member that called it did so on one host clock.
func enqueues(k *results.KernelTimes, all []rankResult, members []int) {
	out := make([]float64, len(members))
	clock := ""
	first, have := uint64(0), false
	for i, wr := range members {
		out[i] = -1
		rec := all[wr].Rec
		if rec == nil || rec.EnqueueNS == 0 {
			continue
		}
		if clock != "" && rec.Clock != clock {
			return
		}
		clock = rec.Clock
		if !have || rec.EnqueueNS < first {
			first, have = rec.EnqueueNS, true
		}
	}
	if !have {
		return
	}
	for i, wr := range members {
		if rec := all[wr].Rec; rec != nil && rec.EnqueueNS != 0 {
			out[i] = float64(rec.EnqueueNS-first) / 1e3
		}
	}
	k.EnqueueUS = out
}
