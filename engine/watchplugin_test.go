package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWatchPluginPath: the plugin is found beside the binary (make
// plugin), in ../lib/collbench (make install), and through a symlink to
// the binary; where it is not, one line says how to build it, exit 2.
func TestWatchPluginPath(t *testing.T) {
	touch := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	beside := filepath.Join(dir, "bin", "collbench")
	touch(beside)
	touch(filepath.Join(dir, "bin", WatchPluginName))
	installed := filepath.Join(dir, "usr", "bin", "collbench")
	touch(installed)
	touch(filepath.Join(dir, "usr", "lib", "collbench", WatchPluginName))
	link := filepath.Join(dir, "elsewhere", "collbench")
	if err := os.MkdirAll(filepath.Dir(link), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(installed, link); err != nil {
		t.Fatal(err)
	}
	bare := filepath.Join(dir, "bare", "collbench")
	touch(bare)
	for _, c := range []struct{ exe, want string }{
		{beside, filepath.Join(dir, "bin", WatchPluginName)},
		{installed, filepath.Join(dir, "usr", "lib", "collbench", WatchPluginName)},
		{link, filepath.Join(dir, "usr", "lib", "collbench", WatchPluginName)},
	} {
		got, err := WatchPluginPath(c.exe)
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.exe, got, err, c.want)
		}
	}
	_, err := WatchPluginPath(bare)
	if err == nil || ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), "make plugin") || strings.Contains(err.Error(), "\n") {
		t.Errorf("no plugin: %v (exit %d), want one line saying to run make plugin, exit 2", err, ExitCode(err))
	}
}
