// Package tune holds what `collbench tune` needs beside the measuring: the
// tuner file (package tunefile) it writes and checks, the rule that says
// when one choice beats another beyond the noise, and the budgeted search
// over a collective's choices.
package tune

import "collbench/tunefile"

// ExamplePluginChoice is what NCCL's example tuner plugin (its main
// branch, plugins/tuner/example/plugin.c) makes NCCL run for a message of
// size bytes of coll on ranks ranks and nodes nodes with the file es: the
// first line that matches, whose algorithm and protocol win where NCCL can
// run them; and one channel unless that line names more, because the
// plugin sets one channel before it looks at its lines. ok is false where
// no line matches (NCCL's own algorithm and protocol, on one channel).
func ExamplePluginChoice(es []tunefile.Entry, coll string, size int64, ranks, nodes int) (c Choice, ok bool) {
	e, ok := tunefile.Match(es, coll, size, ranks, nodes)
	c.Channels = 1
	if !ok {
		return c, false
	}
	c.Algorithm, c.Protocol = e.Algorithm, e.Protocol
	if e.Channels > 0 {
		c.Channels = e.Channels
	}
	return c, true
}
