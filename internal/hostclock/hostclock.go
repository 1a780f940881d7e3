// Package hostclock names this host's clocks, so that times taken by two
// processes can be told comparable (the same host) or not.
package hostclock

import (
	"os"
	"strconv"
	"strings"
	"sync"
)

// ID is this host's boot id, which every process on the host shares and
// no other host has; where it cannot be read, a name comparable within
// this process only.
var ID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "pid " + strconv.Itoa(os.Getpid())
	}
	return strings.TrimSpace(string(b))
})
