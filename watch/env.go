package watch

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"collbench/internal/secret"
)

// EnvAddr is the variable that points a job's processes at the collector
// (host:port); without it nothing is sent.
const EnvAddr = "COLLBENCH_WATCH"

// EnvEvery samples the operations a job's processes send: with N, only
// those whose number is a multiple of N (the same ones on every rank), so
// a collector keeps up with a job N times larger or faster (1, the
// default: every operation).
const EnvEvery = "COLLBENCH_WATCH_EVERY"

// maxEvery bounds EnvEvery: beyond it the judge's window of 32 sampled
// operations would span hours of a job.
const maxEvery = 1_000_000

// SenderFromEnv starts the sender to the collector that getenv names
// ($COLLBENCH_WATCH, with the job secret in $COLLBENCH_TOKEN or
// $COLLBENCH_TOKEN_FILE), filling in o's address and key; or returns nil:
// silently without the variable, and after one line to o.Warn, beginning
// with who, when the address is not host:port or the secret is missing.
// The job then runs as it would without collbench watch.
func SenderFromEnv(getenv func(string) string, who string, o SenderOptions) *Sender {
	addr := getenv(EnvAddr)
	if addr == "" {
		return nil
	}
	warn := o.Warn
	if warn == nil {
		warn = func(string) {}
	}
	host, port, err := net.SplitHostPort(strings.TrimSpace(addr))
	if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
		warn(fmt.Sprintf("%s: %s=%q is not host:port; nothing is sent, the job runs on", who, EnvAddr, addr))
		return nil
	}
	every := 1
	if v := strings.TrimSpace(getenv(EnvEvery)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxEvery {
			warn(fmt.Sprintf("%s: %s=%q is not a whole number from 1 to %d; nothing is sent, the job runs on", who, EnvEvery, v, maxEvery))
			return nil
		}
		every = n
	}
	key, err := secret.Load(getenv)
	if err != nil || len(key) == 0 {
		warn(fmt.Sprintf("%s: %s is set without the job secret (%s or %s); nothing is sent, the job runs on",
			who, EnvAddr, secret.EnvToken, secret.EnvTokenFile))
		return nil
	}
	o.Addr, o.Key, o.Every = strings.TrimSpace(addr), key, every
	return NewSender(o)
}
