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
	key, err := secret.Load(getenv)
	if err != nil || len(key) == 0 {
		warn(fmt.Sprintf("%s: %s is set without the job secret (%s or %s); nothing is sent, the job runs on",
			who, EnvAddr, secret.EnvToken, secret.EnvTokenFile))
		return nil
	}
	o.Addr, o.Key = strings.TrimSpace(addr), key
	return NewSender(o)
}
