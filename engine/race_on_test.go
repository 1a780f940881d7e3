//go:build race

package engine

// raceBuild is true under the race detector, which makes the cluster
// model's long searches several times slower (see skipModelSearchUnderRace).
const raceBuild = true
