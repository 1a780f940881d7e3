package measure

import (
	"reflect"
	"strings"
	"testing"

	"collbench/internal/words"
)

func TestParseSizes(t *testing.T) {
	K, M, G := int64(1<<10), int64(1<<20), int64(1<<30)
	cases := []struct {
		in   string
		want []int64
	}{
		{"8", []int64{8}},
		{"8,1K,1M", []int64{8, K, M}},
		{"8:64", []int64{8, 16, 32, 64}},
		{"8:100", []int64{8, 16, 32, 64}},
		{"1M:64M:x4", []int64{M, 4 * M, 16 * M, 64 * M}},
		{"1M:4M:+1M", []int64{M, 2 * M, 3 * M, 4 * M}},
		{"1G:4G", []int64{G, 2 * G, 4 * G}},
		{"0.5K", []int64{512}},
		{" 8 , 16 ", []int64{8, 16}},
		{"4:4", []int64{4}},
	}
	for _, c := range cases {
		got, err := ParseSizes(c.in)
		if err != nil {
			t.Errorf("ParseSizes(%q): %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseSizes(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestParseSizesRejects(t *testing.T) {
	cases := map[string]string{
		"0":         "positive",
		"-8":        "invalid size",
		"1Q":        "invalid size",
		"8:4":       "start 8 is larger than end 4",
		"":          "empty",
		"8,,16":     "empty item",
		"1:8:x1":    "factor",
		"1:8:y2":    "must be xF",
		"1:8:+0":    "positive",
		"1:2:3:4":   "invalid size range",
		"2T":        "1T limit",
		"1.3":       "whole number",
		"1e3":       "invalid size",
		"0x10":      "invalid size",
		"1:1G:+1":   "more than",
		"abc":       "invalid size",
		"8iB":       "invalid size",
		"NaN":       "invalid size",
		"1:Inf":     "invalid size",
		"1_000":     "invalid size",
		"1K:1Q:x2":  "invalid size",
		"1Q:1K:x2":  "invalid size",
		"8:16:xabc": "factor",
		"1k,1KB":    `1024 bytes is listed by "1k" and "1KB"`,
		"8,8:16":    `8 bytes is listed by "8" and "8:16"`,
		"8,8":       `listed twice by "8"`,
		"1K:8K,4K":  "list each size once",
	}
	for in, want := range cases {
		_, err := ParseSizes(in)
		if err == nil {
			t.Errorf("ParseSizes(%q) succeeded", in)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSizes(%q) error %q does not mention %q", in, err, want)
		}
	}
}

func TestSizesFromBounds(t *testing.T) {
	got, err := SizesFromBounds("8", "128", 4, "")
	if err != nil || !reflect.DeepEqual(got, []int64{8, 32, 128}) {
		t.Fatalf("got %v, %v", got, err)
	}
	got, err = SizesFromBounds("1K", "4K", 2, "1K")
	if err != nil || !reflect.DeepEqual(got, []int64{1024, 2048, 3072, 4096}) {
		t.Fatalf("got %v, %v", got, err)
	}
	if _, err := SizesFromBounds("64", "8", 2, ""); err == nil {
		t.Fatal("min > max accepted")
	}
}

func TestFormatSize(t *testing.T) {
	for in, want := range map[int64]string{8: "8", 1024: "1K", 1536: "1536", 64 << 20: "64M", 8 << 30: "8G"} {
		if got := words.SizeArg(in); got != want {
			t.Errorf("words.SizeArg(%d) = %q, want %q", in, got, want)
		}
	}
}
