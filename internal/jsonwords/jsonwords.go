// Package jsonwords says what is wrong with a user's JSON file in the
// user's words: where the text breaks, or which field holds what kind of
// value instead of which, never a Go type or package name.
package jsonwords

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// Problem says in a reader's words what is wrong with a JSON text:
// where it breaks, or which field holds what kind of value instead of
// which, with no Go type names.
func Problem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te):
		where := "the document"
		if te.Field != "" {
			where = fmt.Sprintf("field %q", te.Field)
		}
		got, _, _ := strings.Cut(te.Value, " ")
		return fmt.Sprintf("%s holds a JSON %s where %s belongs", where, got, kindOf(te.Type))
	case errors.As(err, &se) && strings.Contains(se.Error(), "unexpected end"):
		return "the JSON ends early (a cut-off file?)"
	case errors.As(err, &se):
		return fmt.Sprintf("not valid JSON at byte %d: %s", se.Offset, se.Error())
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "the JSON ends early (a cut-off file?)"
	}
	return err.Error()
}

// kindOf names the kind of JSON value a Go type takes.
func kindOf(t reflect.Type) string {
	if t == nil {
		return "another kind of value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		if t.String() == "time.Time" {
			return "a time (RFC 3339 text)"
		}
		return "an object"
	case reflect.String:
		return "text"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "another kind of value"
}

// Decode reads data into v, refusing fields v does not have (a file of
// another kind), and says what is wrong in the user's words.
func Decode(data []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return fmt.Errorf("unknown field %s", f)
		}
		return errors.New(Problem(err))
	}
	return nil
}
