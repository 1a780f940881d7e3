// Package kernels embeds the PTX of the GPU backend's fill and check
// kernels (verify.cu, compiled with `make ptx`).
package kernels

import _ "embed"

// PTX is the NUL-terminated PTX module holding cb_fill and cb_check.
//
//go:embed verify.ptx
var ptx string

// PTX returns the module text with a terminating NUL, as the driver's
// module loader wants it.
func PTX() string { return ptx + "\x00" }
