package results

import (
	"math"
	"testing"
)

func TestNewIterStats(t *testing.T) {
	var s []float64
	for i := 1; i <= 100; i++ {
		s = append(s, float64(i))
	}
	st := NewIterStats(s)
	if st.Samples != 100 || st.MinUS != 1 || st.MaxUS != 100 || st.P50US != 50 || st.P99US != 99 || st.MeanUS != 50.5 {
		t.Fatalf("%+v", st)
	}
	// sample standard deviation of 1..100 is 29.011...
	if math.Abs(st.CV-29.011491975882016/50.5) > 1e-12 {
		t.Fatalf("cv %v", st.CV)
	}
	if NewIterStats(nil) != nil {
		t.Fatal("empty samples should give nil")
	}
	if one := NewIterStats([]float64{5}); one.CV != 0 || one.P99US != 5 {
		t.Fatalf("%+v", one)
	}
}
