package bootstrap

import "collbench/internal/secret"

// EnvToken and EnvTokenFile name the job's shared secret, which every
// process of a world (and collbench watch's collector) must hold: its
// value, or a file that holds it.
const (
	EnvToken     = secret.EnvToken
	EnvTokenFile = secret.EnvTokenFile
)

// LoadSecret reads the job's secret from EnvToken or the file
// EnvTokenFile names; neither set is a nil secret and no error.
func LoadSecret(getenv func(string) string) ([]byte, error) { return secret.Load(getenv) }
