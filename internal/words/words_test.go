package words

import "testing"

func TestWords(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Bytes(8), "8 B"}, {Bytes(1024), "1 KiB"}, {Bytes(1536), "1536 B"}, {Bytes(3 << 20), "3 MiB"}, {Bytes(2 << 40), "2 TiB"},
		{BytesApprox(8), "8 B"}, {BytesApprox(1024), "1.0 KiB"}, {BytesApprox(1536), "1.5 KiB"}, {BytesApprox(1 << 30), "1.0 GiB"},
		{SizeArg(8), "8"}, {SizeArg(1024), "1K"}, {SizeArg(64 << 20), "64M"}, {SizeArg(1536), "1536"},
		{Ints([]int{0, 2, 5}), "0, 2, 5"}, {Ints(nil), ""}, {Ints([]int{0, 1, 2, 3, 5}), "0-3, 5"},
		{Ints(stride(0, 2, 30)), "0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 42, 44, 46 and 6 more"},
		{Ints(append(stride(0, 1, 43), stride(44, 1, 20)...)), "0-42, 44-63"},
		{OrDash(""), "-"}, {OrDash("NV18"), "NV18"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestLargeWorldWords(t *testing.T) {
	eights := make([][]int, 1024)
	for i := range eights {
		for k := 0; k < 8; k++ {
			eights[i] = append(eights[i], i*8+k)
		}
	}
	pairs := make([][]int, 4096)
	for i := range pairs {
		pairs[i] = []int{i, i + 4096}
	}
	for _, c := range []struct{ got, want string }{
		{Count(8), "8"}, {Count(1024), "1,024"}, {Count(65536), "65,536"}, {Count(1234567), "1,234,567"}, {Count(-1024), "-1,024"},
		{Ranges([]int{0, 1, 2, 3, 8, 10, 11}), "0-3,8,10,11"}, {Ranges(nil), ""}, {Ranges([]int{5, 4, 3}), "5,4,3"},
		{Group([]int{0, 1, 2, 3, 4, 5, 6, 7}), "[0-7]"},
		{GroupsFull([][]int{{0, 1}, {2, 3}}), "[[0,1],[2,3]]"},
		{Groups([][]int{{1, 2, 3}, {0}}), "[[1,2,3],[0]]"},
		{Groups(eights[:4]), "[[0-7],[8-15],[16-23],[24-31]]"},
		{Groups(eights), "1,024 groups of 8: [[0-7],[8-15],[16-23],[24-31],[32-39],…,[8184-8191]]"},
		{Groups(pairs), "4,096 groups of 2: [[0,4096],[1,4097],[2,4098],[3,4099],…,[4095,8191]]"},
		{Groups([][]int{stride(0, 2, 32), stride(1, 2, 32)}), "2 groups of 32: [[0,2,4,…,62],[1,3,5,…,63]]"},
		{Groups(append([][]int{{0}}, eights[1:]...)), "1,024 groups of 1-8 ranks: [[0],[8-15],[16-23],[24-31],…,[8184-8191]]"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// stride is n ranks from first, step apart.
func stride(first, step, n int) []int {
	var g []int
	for i := 0; i < n; i++ {
		g = append(g, first+i*step)
	}
	return g
}
