// Package engine runs collbench's work outside any command line: it
// chooses the backend, reads how a launcher started the process, forms the
// world of processes, guards a run (the watchdog, faults reported by other
// processes, prompt cancellation), and classifies every error by the exit
// code it carries. The CLI in cmd/collbench parses flags into options and
// calls it.
package engine
