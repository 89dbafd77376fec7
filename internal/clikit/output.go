package clikit

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/term"
)

// Table prints aligned columns.
type Table struct {
	tw *tabwriter.Writer
}

// NewTable returns a table on w whose first row is headers (none when
// empty).
func NewTable(w io.Writer, headers ...string) *Table {
	t := &Table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	if len(headers) > 0 {
		t.Row(toAny(headers)...)
	}
	return t
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Row adds a row; each cell is rendered on one line (times in RFC 3339,
// durations rounded, long text cut).
func (t *Table) Row(cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(t.tw, "\t")
		}
		fmt.Fprint(t.tw, cell(c))
	}
	fmt.Fprintln(t.tw)
}

// Flush writes the table.
func (t *Table) Flush() error { return t.tw.Flush() }

// cell renders a table cell on one line.
func cell(v any) string {
	var s string
	switch x := v.(type) {
	case time.Time:
		if x.IsZero() {
			return "-"
		}
		s = x.UTC().Format(time.RFC3339)
	case time.Duration:
		s = Age(x)
	case []byte:
		s = string(x)
	default:
		s = fmt.Sprint(v)
	}
	if s == "" {
		return "-"
	}
	s = strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' || r < 0x20 {
			return ' '
		}
		return r
	}, s)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// Age renders a duration rounded for humans: 850ms, 42s, 3m12s, 5h03m.
func Age(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
}

// AgeOf renders the time since t, "-" for a zero t.
func AgeOf(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return Age(time.Since(t))
}

// WriteJSON prints v as indented JSON.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// OutputOptions are the flags of commands that print records.
type OutputOptions struct {
	JSON bool
}

// BindOutput defines --json on fs.
func BindOutput(fs *pflag.FlagSet, o *OutputOptions) {
	fs.BoolVar(&o.JSON, "json", false, "print JSON instead of a table")
}

// IsTerminal reports whether v (or the writer a SyncWriter wraps) is a
// terminal (not a pipe, a file or /dev/null).
func IsTerminal(v any) bool {
	if s, ok := v.(*SyncWriter); ok {
		v = s.w
	}
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// SyncWriter serialises the writes of the loggers, consoles and progress
// bars that share one output, so that their lines never interleave.
type SyncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// NewSyncWriter returns w, serialised.
func NewSyncWriter(w io.Writer) *SyncWriter { return &SyncWriter{w: w} }

// Write writes p in one piece.
func (s *SyncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
