package bootstrap

import (
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestListenReason: each common reason a port cannot be listened on is
// said in words, from the errors the system really returns where this
// machine can make them.
func TestListenReason(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, inUse := net.Listen("tcp", ln.Addr().String())
	_, notHere := net.Listen("tcp", "192.0.2.1:0") // TEST-NET-1: no host's own
	denied := &net.OpError{Op: "listen", Net: "tcp", Err: os.NewSyscallError("bind", syscall.EACCES)}
	for _, c := range []struct {
		err  error
		want string
	}{
		{inUse, "the port is in use"},
		{notHere, "no interface of this host has that address"},
		{denied, "ports below 1024 need root"},
		{os.ErrDeadlineExceeded, "i/o timeout"},
	} {
		if c.err == nil {
			t.Errorf("want an error with %q, the listen succeeded", c.want)
			continue
		}
		if got := ListenReason(c.err); !strings.Contains(got, c.want) {
			t.Errorf("%v: %q, want %q", c.err, got, c.want)
		}
	}
}
