//go:build race

package racebuild

// Enabled is true under the race detector.
const Enabled = true
