// Package secret holds the per-job secret that lets only the processes of
// one job join its rendezvous and its data connections. The secret never
// crosses the wire: a process proves it holds it by answering a fresh
// challenge with an HMAC-SHA256 over the challenge and what it claims.
package secret

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// Environment variables that carry the secret to every rank of a job.
const (
	EnvToken     = "COLLBENCH_TOKEN"
	EnvTokenFile = "COLLBENCH_TOKEN_FILE" //nolint:gosec // the name of the variable that holds the secret, not a secret
)

// NonceSize is the length of a challenge in bytes.
const NonceSize = 32

// New returns a fresh random secret, hex-encoded so it can travel in an
// environment variable.
func New() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making a job secret: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// Nonce returns NonceSize random bytes.
func Nonce() []byte {
	b := make([]byte, NonceSize)
	if _, err := rand.Read(b); err != nil {
		// crypto/rand does not fail on Linux; a zero nonce would still be
		// answered correctly, only less freshly.
		return b
	}
	return b
}

// Load reads the job secret from $COLLBENCH_TOKEN or the file named by
// $COLLBENCH_TOKEN_FILE. It returns nil and no error when neither is set.
func Load(getenv func(string) string) ([]byte, error) {
	if v := strings.TrimSpace(getenv(EnvToken)); v != "" {
		return []byte(v), nil
	}
	path := strings.TrimSpace(getenv(EnvTokenFile))
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %v (the file must hold the job secret)", EnvTokenFile, path, err)
	}
	v := strings.TrimSpace(string(data))
	if v == "" {
		return nil, fmt.Errorf("%s=%s is empty (put the job secret in it, e.g. from: openssl rand -hex 32)", EnvTokenFile, path)
	}
	return []byte(v), nil
}

// Proof is the HMAC-SHA256 of label and parts under key. Integers are
// written as 8 little-endian bytes and byte slices with their length, so
// no two different claims hash the same input.
func Proof(key []byte, label string, parts ...any) []byte {
	m := hmac.New(sha256.New, key)
	writeField(m, []byte(label))
	for _, p := range parts {
		switch v := p.(type) {
		case []byte:
			writeField(m, v)
		case string:
			writeField(m, []byte(v))
		case int:
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], uint64(v)) //nolint:gosec // G115: ranks are not negative
			m.Write(b[:])
		default:
			panic(fmt.Sprintf("secret.Proof: unsupported part %T", p))
		}
	}
	return m.Sum(nil)
}

func writeField(m interface{ Write([]byte) (int, error) }, b []byte) {
	var l [8]byte
	binary.LittleEndian.PutUint64(l[:], uint64(len(b)))
	// A hash's Write never returns an error (hash.Hash).
	_, _ = m.Write(l[:])
	_, _ = m.Write(b)
}

// Verify reports whether proof is Proof(key, label, parts...), in constant time.
func Verify(key, proof []byte, label string, parts ...any) bool {
	return hmac.Equal(proof, Proof(key, label, parts...))
}
