package streamtest

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
)

// Slice is a projection.Stream over Events, Chunk events per batch; a
// position is the index after a batch's last event.
type Slice struct {
	Events []aggregate.Event
	Chunk  int
}

// Read implements projection.Stream: the batches after from (from the
// first event when from is nil), each stamped with the time it is read.
func (s *Slice) Read(ctx context.Context, from projection.Position, fn func(context.Context, projection.StreamBatch) error) error {
	start := 0
	if from != nil {
		n, err := strconv.Atoi(string(from))
		if err != nil {
			return fmt.Errorf("position %q: %w", from, err)
		}
		start = n
	}
	for i := start; i < len(s.Events); i += s.Chunk {
		hi := min(i+s.Chunk, len(s.Events))
		sb := projection.StreamBatch{Events: s.Events[i:hi], Read: int64(hi - i), Position: projection.Position(strconv.Itoa(hi)), Time: time.Now()}
		if err := fn(ctx, sb); err != nil {
			return err
		}
	}
	return nil
}
