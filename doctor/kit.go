package doctor

// The stages' kit: what more than one stage reads, so that no stage file
// names another's identifiers (TestStageFilesNameOnlyTheirOwn): whether
// pairs touch, and how often a suspect is measured again before it is
// named. What the verdict reads too is the site's (site.go).

// touches says whether pair p shares a rank with a pair of round.
func touches(round [][2]int, p [2]int) bool {
	for _, q := range round {
		if q[0] == p[0] || q[0] == p[1] || q[1] == p[0] || q[1] == p[1] {
			return true
		}
	}
	return false
}

// confirmAttempts is how often a suspect is measured again before it is
// named; one attempt that is not slow clears it.
const confirmAttempts = 3

// busyScale and busyRetries: a suspect measured again beside controls that
// ran under busyScale of their first figures is measured again, at most
// busyRetries more times, before such a moment clears it (both the pairs
// within hosts and those across hosts).
const (
	busyScale   = 0.5
	busyRetries = 2
)
