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

// Number is what the flag checks compare: counts and durations.
type Number interface {
	~int | ~int32 | ~int64 | ~float64
}

// AtLeast is the usage error "--flag must be at least min" when v < min,
// else nil. Flag checks are listed in order in a cmp.Or: the first one
// broken is the error.
func AtLeast[T Number](flag string, v, min T) error {
	if v < min {
		return Usagef("--%s must be at least %v", flag, min)
	}
	return nil
}

// Positive is the usage error "--flag must be positive" when v <= 0.
func Positive[T Number](flag string, v T) error {
	if v <= 0 {
		return Usagef("--%s must be positive", flag)
	}
	return nil
}

// NotNegative is the usage error "--flag must not be negative" when v < 0.
func NotNegative[T Number](flag string, v T) error {
	if v < 0 {
		return Usagef("--%s must not be negative", flag)
	}
	return nil
}

// ValidateAll returns the first error of the groups' Validate, in order.
func ValidateAll(groups ...interface{ Validate() error }) error {
	for _, g := range groups {
		if err := g.Validate(); err != nil {
			return err
		}
	}
	return nil
}
