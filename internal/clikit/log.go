package clikit

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"
)

// LogOptions are the logging flags of every command.
type LogOptions struct {
	// Format is "text" or "json".
	Format string
	// Level is debug, info, warn or error.
	Level string
	level slog.Level
}

// BindLog defines --log-format and --log-level on fs, the level defaulting
// to defLevel.
func BindLog(fs *pflag.FlagSet, o *LogOptions, defLevel string) {
	fs.StringVar(&o.Format, "log-format", "text", "log `format` on stderr: text or json (json: every line on stderr, and of run, serve and demo on stdout, is one JSON object)")
	fs.StringVar(&o.Level, "log-level", defLevel, "minimum log `level`: debug, info, warn or error")
}

// Validate checks the flags.
func (o *LogOptions) Validate() error {
	switch o.Format {
	case "text", "json":
	default:
		return Usagef("--log-format must be text or json, not %q", o.Format)
	}
	if err := o.level.UnmarshalText([]byte(o.Level)); err != nil {
		return Usagef("--log-level must be debug, info, warn or error, not %q", o.Level)
	}
	return nil
}

// JSON reports whether the output is JSON lines.
func (o *LogOptions) JSON() bool { return o.Format == "json" }

// Logger returns the logger the options ask for, writing to w. Durations
// are logged in seconds (a float) in JSON and as Go duration strings in
// text.
func (o *LogOptions) Logger(w io.Writer) *slog.Logger {
	hopts := &slog.HandlerOptions{Level: o.level}
	if o.JSON() {
		hopts.ReplaceAttr = durationSeconds
		return slog.New(trimPrefix{slog.NewJSONHandler(w, hopts)})
	}
	return slog.New(trimPrefix{slog.NewTextHandler(w, hopts)})
}

// trimPrefix drops the "inorder: " some library messages start with: the
// whole process is inorder, a prefix on every line says nothing.
type trimPrefix struct{ slog.Handler }

func (h trimPrefix) Handle(ctx context.Context, r slog.Record) error {
	r.Message = strings.TrimPrefix(r.Message, "inorder: ")
	return h.Handler.Handle(ctx, r)
}

func (h trimPrefix) WithAttrs(attrs []slog.Attr) slog.Handler {
	return trimPrefix{h.Handler.WithAttrs(attrs)}
}

func (h trimPrefix) WithGroup(name string) slog.Handler { return trimPrefix{h.Handler.WithGroup(name)} }

// durationSeconds logs durations as seconds (a float), not nanoseconds.
func durationSeconds(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Float64(a.Key+"_seconds", a.Value.Duration().Seconds())
	}
	return a
}

// Console prints the lines a command shows a person on stderr — "serving
// http://…", progress, notes — as plain text, or as one JSON object each
// when the logs are JSON, so that a log shipper reads every line.
type Console struct {
	w    io.Writer
	json *slog.Logger // nil for text
}

// NewConsole returns the console of a command whose logs o configures.
func NewConsole(w io.Writer, o *LogOptions) *Console {
	c := &Console{w: w}
	if o != nil && o.JSON() {
		c.json = slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{ReplaceAttr: durationSeconds}))
	}
	return c
}

// JSON reports whether the console writes JSON.
func (c *Console) JSON() bool { return c.json != nil }

// Printf prints a line; attrs are added as fields in JSON, ignored in text.
func (c *Console) Printf(attrs []any, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if c.json != nil {
		c.json.Info(msg, attrs...)
		return
	}
	fmt.Fprintln(c.w, msg)
}

// Writer returns the console's writer, for text only.
func (c *Console) Writer() io.Writer { return c.w }

// Note prints msg as a line of its own (a JSON object when the console is
// JSON).
func (c *Console) Note(msg string) { c.Printf(nil, "%s", msg) }
