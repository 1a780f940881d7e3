package results

import "collbench/internal/hostload"

// StartHostLoad marks the host's CPU time now; the function it returns
// gives the share that went to others since (Environment.HostLoad), or nil
// where the host does not count it.
func StartHostLoad() func() *hostload.Load {
	start := hostload.Take()
	return func() *hostload.Load {
		l, ok := hostload.Since(start, hostload.Take())
		if !ok {
			return nil
		}
		return &l
	}
}
