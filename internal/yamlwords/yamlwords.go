// Package yamlwords turns the YAML decoder's messages into one line a user
// can act on: the line number and the problem, without the decoder's tags
// or Go type names.
package yamlwords

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// LineError is a problem found at one line of a YAML file.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

func (e *LineError) Unwrap() error { return e.Err }

// At is err at node n's line.
func At(n *yaml.Node, err error) error { return &LineError{n.Line, err} }

// Atf is a formatted error at node n's line.
func Atf(n *yaml.Node, format string, a ...any) error { return At(n, fmt.Errorf(format, a...)) }

var unknownRE = regexp.MustCompile(`line (\d+): field (\S+) not found in type \S+`)

// typeRE matches yaml's "cannot unmarshal !!str `abc` into int", whose
// tags and Go type names mean nothing to a user.
var typeRE = regexp.MustCompile("cannot unmarshal !!(\\w+) `([^`]*)` into (\\S+)")

// Tidy rewrites a decoder's message as one line: "line 7: unknown key
// \"sizez\"", "line 3: \"abc\" is not a whole number". about names the
// document where the reader finds the valid keys.
func Tidy(err error, about string) error {
	if err == nil {
		return nil
	}
	var le *LineError
	if errors.As(err, &le) {
		return le
	}
	msg := err.Error()
	if m := unknownRE.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("line %s: unknown key %q", m[1], m[2])
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = strings.ReplaceAll(msg, "unmarshal errors:\n  ", "")
	msg = typeRE.ReplaceAllStringFunc(msg, func(s string) string {
		m := typeRE.FindStringSubmatch(s)
		return fmt.Sprintf("%q is not %s", m[2], kind(m[3], about))
	})
	return errors.New(strings.Join(strings.Fields(msg), " "))
}

// kind says in words what a value of Go type goType should have been.
func kind(goType, about string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "map[") || strings.Contains(goType, "."):
		return "a section of keys"
	case strings.HasPrefix(goType, "uint"):
		return "a whole number, 0 or more"
	case strings.HasPrefix(goType, "int"):
		return "a whole number"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "bool":
		return "true or false"
	case goType == "string":
		return "text"
	}
	return "of the right kind (see " + about + ")"
}
