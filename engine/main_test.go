package engine

import (
	"os"
	"testing"
	"time"
)

// TestMain shortens doctor's idle window: the fake machines' utilisation
// is a constant that one sample reads as well as ten.
func TestMain(m *testing.M) {
	IdleWindow = 60 * time.Millisecond
	os.Exit(m.Run())
}
