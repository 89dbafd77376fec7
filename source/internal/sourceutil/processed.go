package sourceutil

import (
	"iter"

	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

// Processed yields, in order, the deliveries of a committed batch that the
// processor processed, each with its result: results holds one result per
// delivery that was not rejected (Reject set), in the batch's order.
func Processed(batch []*source.Delivery, results []projection.Result) iter.Seq2[*source.Delivery, projection.Result] {
	return func(yield func(*source.Delivery, projection.Result) bool) {
		i := 0
		for _, d := range batch {
			if d.Reject != nil {
				continue
			}
			r := results[i]
			i++
			if !yield(d, r) {
				return
			}
		}
	}
}
