package secret

import (
	"os"
	"path/filepath"
	"testing"
)

func TestProofBindsEveryPart(t *testing.T) {
	key := []byte("k")
	p := Proof(key, "hello", []byte{1, 2}, 3, "x")
	if !Verify(key, p, "hello", []byte{1, 2}, 3, "x") {
		t.Fatal("a right proof is refused")
	}
	for _, bad := range [][]any{{[]byte{1, 2}, 4, "x"}, {[]byte{1}, 3, "x"}, {[]byte{1, 2}, 3, "y"}} {
		if Verify(key, p, "hello", bad...) {
			t.Errorf("a proof for other parts passes: %v", bad)
		}
	}
	if Verify([]byte("other"), p, "hello", []byte{1, 2}, 3, "x") || Verify(key, p, "welcome", []byte{1, 2}, 3, "x") {
		t.Error("a proof passes under another key or label")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "tok")
	if err := os.WriteFile(f, []byte(" s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	get := func(k string) string { return env[k] }
	if b, err := Load(get); b != nil || err != nil {
		t.Fatalf("no secret set: %q %v", b, err)
	}
	env[EnvTokenFile] = f
	if b, err := Load(get); string(b) != "s3cret" || err != nil {
		t.Fatalf("from a file: %q %v", b, err)
	}
	env[EnvToken] = "direct"
	if b, _ := Load(get); string(b) != "direct" {
		t.Fatalf("the variable should win: %q", b)
	}
	delete(env, EnvToken)
	env[EnvTokenFile] = filepath.Join(dir, "missing")
	if _, err := Load(get); err == nil {
		t.Fatal("a missing token file is accepted")
	}
	if a, _ := New(); len(a) != 64 {
		t.Fatalf("new secret %q", a)
	}
}
