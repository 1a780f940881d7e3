// Package racebuild says whether the program was built with the race
// detector, for tests: make test runs the unit tests under it, and a
// test that runs a model's long search many times over (or bounds a time)
// takes several times longer there than without it.
package racebuild

import "testing"

// SkipLongModelRun skips t in make test's race-detector run (-race and
// -short): make test runs such tests again without the race detector
// (the Makefile's MODEL_SEARCH_TESTS, in unit-model), and make test-long
// runs them with it. Other tests keep the same code under the detector.
func SkipLongModelRun(t testing.TB) {
	t.Helper()
	if Enabled && testing.Short() {
		t.Skip("make test runs this without -race (MODEL_SEARCH_TESTS); make test-long with it")
	}
}

// Few is some in make test's race-detector run (-race and -short), else
// all: a test over every type and reduction runs its concurrency under
// the detector on a few of them, and the whole matrix again without the
// detector (the Makefile's MODEL_SEARCH_TESTS, in unit-model); make
// test-long runs the whole matrix under it. The arithmetic of a type or a
// reduction has no concurrency of its own.
func Few[T any](all, some []T) []T {
	if Enabled && testing.Short() {
		return some
	}
	return all
}
