package clikit

import (
	"errors"
	"fmt"
)

// ErrUsage is wrapped by the errors of invalid command lines (unknown
// command or flag, missing or invalid argument): the process exits with
// status 2. cli.ErrUsage is the same value.
var ErrUsage = errors.New("usage")

// usageError is an invalid command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }
func (e *usageError) Unwrap() error { return ErrUsage }

// Usagef returns an error wrapping ErrUsage with the formatted message.
func Usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// NoArgs is the validate step of commands without positional arguments.
func NoArgs(args []string) error {
	if len(args) > 0 {
		return Usagef("unexpected argument %q", args[0])
	}
	return nil
}

// OneArg returns the single positional argument, what it is named in
// errors.
func OneArg(args []string, what string) (string, error) {
	switch {
	case len(args) == 0:
		return "", Usagef("missing %s", what)
	case len(args) > 1:
		return "", Usagef("unexpected argument %q", args[1])
	case args[0] == "":
		return "", Usagef("empty %s", what)
	}
	return args[0], nil
}
