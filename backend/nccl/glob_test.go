package nccl

import "path/filepath"

func globMatch(pat, name string) (bool, error) { return filepath.Match(pat, name) }
