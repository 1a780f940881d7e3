package topology

import "collbench/internal/hostclock"

// MachineID names the machine this process runs on: every process on it
// shares the name and no other machine has it (its boot id), so that
// simulated hosts on one machine can be told to share its cores.
func MachineID() string { return hostclock.ID() }
