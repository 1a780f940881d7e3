package engine

import (
	"os"

	"collbench/doctor"
	"testing"
	"time"
)

// TestMain shortens doctor's idle window: the fake machines' utilisation
// is a constant that one sample reads as well as ten.
func TestMain(m *testing.M) {
	IdleWindow = 60 * time.Millisecond
	// The modeled machines' fill kernels take under a microsecond and
	// their time slices (Model.SliceUS in the tests) a few: a window of
	// tens of microseconds spans many of them.
	doctor.SustainWindow = 40 * time.Microsecond
	os.Exit(m.Run())
}
