package bootstrap

import (
	"errors"
	"syscall"
)

// ListenReason says in words why an address could not be listened on, and
// what to do: a port in use, a port that needs root, an address that is
// not this host's; any other error as the system gave it.
func ListenReason(err error) string {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return "the port is in use (another collbench or another program holds it): choose another port"
	case errors.Is(err, syscall.EACCES):
		return "permission denied (ports below 1024 need root): choose a port from 1024 up"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "no interface of this host has that address: give one of its addresses, or :PORT for all"
	}
	return err.Error()
}
