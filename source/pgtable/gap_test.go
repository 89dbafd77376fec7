package pgtable_test

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/source/pgtable"
	"github.com/inorder/inorder/source/sourcetest"
)

// envSequenceOnly makes TestSequenceOnlyGap run the suite's Gap check on a
// reader by position alone.
const envSequenceOnly = "INORDER_PGTABLE_SEQUENCE_ONLY"

// The suite's Gap check fails on a reader that takes "seq > last" for its
// position, as pollers of events tables do: a transaction that took a low
// seq and commits after later ones is skipped for ever. The check runs in a
// child test binary, which must fail, saying so; the source as it is passes
// the same check (TestConformance/pgtable/Gap).
func TestGapCheckFailsBySequenceAlone(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.CommandContext(t.Context(), exe, "-test.run=^TestSequenceOnlyGap$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envSequenceOnly+"=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the Gap check passed on a reader by position alone:\n%s", out)
	require.Contains(t, string(out), "committed late at a low position, was skipped: events published after it are applied", "%s", out)
}

// TestSequenceOnlyGap is the body of TestGapCheckFailsBySequenceAlone's child,
// where it must fail; it does nothing unless that test runs it.
func TestSequenceOnlyGap(t *testing.T) {
	if os.Getenv(envSequenceOnly) == "" {
		t.Skip("runs in the child of TestGapCheckFailsBySequenceAlone only")
	}
	sourcetest.Run(t, sourcetest.Subject{
		Name: "pgtable-sequence-only", New: newOwnCase, Features: sourcetest.Features{Only: []string{"Gap"}},
		Consumer: consumer(false, pgtable.SequenceOnly),
	})
}
