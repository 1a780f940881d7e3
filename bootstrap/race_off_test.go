//go:build !race

package bootstrap

// raceBuild is true when the race detector slows everything down, so
// timing bounds are checked only in plain builds.
const raceBuild = false
