package cli

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"collbench/engine"
)

// The rules every flag and COLLBENCH_* variable follows, in one place:
// a value that does not parse is named with what is allowed, in words
// (never strconv's); a count given as 0 or below is refused unless its help
// says what 0 means; flags that cannot go together are refused together.

// minAnnotation marks a numeric flag with the least value it takes.
const minAnnotation = "collbench_min"

// atLeast sets the least value of the named flags: an integer, or for a
// duration flag a duration. A flag given below it is refused before the
// command runs; left out, the flag keeps its default.
func atLeast(fs *pflag.FlagSet, least string, names ...string) {
	for _, n := range names {
		if fs.Lookup(n) == nil {
			panic("atLeast: no flag " + n) // a programming error, caught by every test
		}
		_ = fs.SetAnnotation(n, minAnnotation, []string{least})
	}
}

// checkLeast refuses a given flag below its least value.
func checkLeast(cmd *cobra.Command, fl *pflag.Flag) error {
	least, ok := fl.Annotations[minAnnotation]
	if !ok || len(least) == 0 {
		return nil
	}
	see := fmt.Sprintf(" (see '%s --help')", cmd.CommandPath())
	if fl.Value.Type() == "duration" {
		d, err := time.ParseDuration(fl.Value.String())
		lo, _ := time.ParseDuration(least[0])
		if err == nil && d < lo {
			if lo <= time.Nanosecond {
				return engine.UsageErrorf("invalid --%s %s: must be a positive duration such as 30s or 5m%s", fl.Name, fl.Value, see)
			}
			return engine.UsageErrorf("invalid --%s %s: must be at least %s%s", fl.Name, fl.Value, lo, see)
		}
		return nil
	}
	v, err := strconv.ParseInt(fl.Value.String(), 10, 64)
	lo, _ := strconv.ParseInt(least[0], 10, 64)
	if err == nil && v < lo {
		what := fmt.Sprintf("%d or more", lo)
		if lo == 1 {
			what = "1 or more; leave it out for its default"
		}
		return engine.UsageErrorf("invalid --%s %d: must be %s%s", fl.Name, v, what, see)
	}
	return nil
}

// flagParseRE matches pflag's message for a value that does not parse.
var flagParseRE = regexp.MustCompile(`^invalid argument "(.*)" for "(?:-\w, )?--([\w-]+)" flag: (.*)$`)

// flagError rewrites a flag parsing error in the user's words: the flag,
// the value given and what it takes, never strconv's or time's text.
func flagError(c *cobra.Command, err error) error {
	see := fmt.Sprintf(" (see '%s --help')", c.CommandPath())
	m := flagParseRE.FindStringSubmatch(err.Error())
	if m == nil {
		return &engine.UsageError{Err: fmt.Errorf("%v%s", err, see)}
	}
	value, name, why := m[1], m[2], m[3]
	typ := ""
	if fl := c.Flags().Lookup(name); fl != nil {
		typ = fl.Value.Type()
	}
	want := "a value of the kind its help shows"
	switch typ {
	case "int", "int8", "int16", "int32", "int64":
		want = "a whole number"
	case "uint", "uint8", "uint16", "uint32", "uint64":
		want = "a whole number, 0 or more"
	case "float32", "float64":
		want = "a number"
	case "duration":
		want = "a duration such as 500ms, 30s or 5m"
	case "bool":
		want = "true or false"
	}
	if strings.Contains(why, "out of range") {
		return engine.UsageErrorf("invalid --%s %q: too large (it takes %s)%s", name, value, want, see)
	}
	return engine.UsageErrorf("invalid --%s %q: it takes %s%s", name, value, want, see)
}

// groupErrRE matches Cobra's message for flags of a mutually exclusive group.
var groupErrRE = regexp.MustCompile(`if any flags in the group \[([^\]]*)\] are set none of the others can be; \[([^\]]*)\] were all set`)

// tidyCobra rewrites Cobra's own messages in collbench's words.
func tidyCobra(msg string) string {
	if m := groupErrRE.FindStringSubmatch(msg); m != nil {
		var given []string
		for _, n := range strings.Fields(m[2]) {
			given = append(given, "--"+n)
		}
		return fmt.Sprintf("%s cannot go together: give one of them", strings.Join(given, " and "))
	}
	return msg
}
