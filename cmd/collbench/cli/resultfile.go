package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"collbench/report"
	"collbench/results"
)

// outputFormat resolves what -o FILE receives.
func (o *BenchOptions) fileFormat(stdout report.Format) report.Format {
	if o.formatSet {
		return stdout
	}
	switch strings.ToLower(filepath.Ext(o.Output)) {
	case ".csv":
		return report.FormatCSV
	case ".txt":
		return report.FormatTable
	}
	return report.FormatJSON
}

// resultFile keeps --output current: after every row the whole document is
// written to a temporary file beside it and renamed over it, so the file
// always holds a valid document with every row measured so far, whenever
// the process is killed. An existing file is replaced only once the run
// has a row to put there. A stream (a pipe, a device, standard output)
// cannot be rewritten: it gets the whole document once, at the end.
type resultFile struct {
	target *results.Output
	format report.Format
	out    io.Writer // the command's standard output
	errOut io.Writer
	enc    results.Encoder
	failed bool
}

func (r *resultFile) render(doc *results.Document) func(io.Writer) error {
	if r.format == report.FormatJSON {
		return func(w io.Writer) error { return r.enc.Write(w, doc) }
	}
	return func(w io.Writer) error { return report.Write(w, doc, r.format) }
}

// toStdout says whether the document goes to standard output.
func (r *resultFile) toStdout() bool { return r != nil && r.target.IsStdout() }

// set writes the document after row was set at index i of its results
// (appended, or measured again by a later cycle).
func (r *resultFile) set(doc *results.Document, i int, row results.Row) {
	if r == nil {
		return
	}
	if err := r.enc.Set(i, row); err == nil && r.target.Replaced() {
		err = r.target.Write(false, r.render(doc))
		if err != nil && !r.failed {
			r.failed = true
			fmt.Fprintf(r.errOut, "collbench: cannot update --output: %v (will try again at the end)\n", err)
		}
	}
}

// finish writes the final document, synced to disk; with no row at all an
// existing file is left as it was.
func (r *resultFile) finish(doc *results.Document) error {
	if r == nil {
		return nil
	}
	if len(doc.Results) == 0 && r.target.Replaced() {
		if _, err := os.Stat(r.target.Path); err == nil {
			fmt.Fprintf(r.errOut, "collbench: no row was measured; %s is left as it was\n", r.target.Given)
			return nil
		}
	}
	return writeTarget(r.out, r.target, true, r.render(doc))
}
