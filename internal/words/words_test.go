package words

import "testing"

func TestWords(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Bytes(8), "8 B"}, {Bytes(1024), "1 KiB"}, {Bytes(1536), "1536 B"}, {Bytes(3 << 20), "3 MiB"}, {Bytes(2 << 40), "2 TiB"},
		{BytesApprox(8), "8 B"}, {BytesApprox(1024), "1.0 KiB"}, {BytesApprox(1536), "1.5 KiB"}, {BytesApprox(1 << 30), "1.0 GiB"},
		{SizeArg(8), "8"}, {SizeArg(1024), "1K"}, {SizeArg(64 << 20), "64M"}, {SizeArg(1536), "1536"},
		{Ints([]int{0, 2, 5}), "0, 2, 5"}, {Ints(nil), ""},
		{OrDash(""), "-"}, {OrDash("NV18"), "NV18"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
