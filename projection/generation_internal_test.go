package projection

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/projection/internal/generation"
)

// TestGenerationNames checks that the states and phases package
// internal/generation writes are the ones this package documents.
func TestGenerationNames(t *testing.T) {
	t.Parallel()
	for _, c := range [][2]string{
		{StateBuilding, generation.StateBuilding}, {StateCatchUp, generation.StateCatchUp}, {StateLive, generation.StateLive},
		{StatePrevious, generation.StatePrevious}, {StateFailed, generation.StateFailed}, {StateRetired, generation.StateRetired},
		{StateDropped, generation.StateDropped},
		{PhaseReplay, generation.PhaseReplay}, {PhaseFinalize, generation.PhaseFinalize}, {PhaseCatchUp, generation.PhaseCatchUp},
		{PhaseVerify, generation.PhaseVerify}, {PhaseSwitch, generation.PhaseSwitch}, {PhaseReady, generation.PhaseReady},
		{PhaseSwitchRequested, generation.PhaseSwitchRequested},
	} {
		require.Equal(t, c[0], c[1])
	}
}
