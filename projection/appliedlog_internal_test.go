package projection

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/inorder/inorder/aggregate"
)

// isDefaultID must agree with aggregate.DefaultID on every id, the
// near misses included.
func TestIsDefaultID(t *testing.T) {
	for _, c := range []struct {
		agg     string
		version int64
		id      string
	}{
		{"pay-1", 7, "pay-1:7"}, {"pay-1", 7, "pay-1:70"}, {"pay-1", 17, "pay-1:7"}, {"pay-1", 7, "pay-1:07"},
		{"pay-1", 7, "pay-1;7"}, {"pay-1", 7, "pay-2:7"}, {"pay-1", 7, "pay-1:"}, {"pay-1", 7, "pay-1"},
		{"a:b", 3, "a:b:3"}, {"a", 3, "a:b:3"}, {"", 1, ":1"}, {"", 1, "1"}, {"x", -2, "x:-2"},
		{"x", 9223372036854775807, "x:9223372036854775807"}, {"ü", 1, "ü:1"}, {"x", 1, ""},
		{"event", 1, "3f2c5a7e-0000-4000-8000-000000000001"},
	} {
		want := c.id == aggregate.DefaultID(c.agg, c.version)
		assert.Equal(t, want, isDefaultID(c.id, c.agg, c.version), "isDefaultID(%q, %q, %d)", c.id, c.agg, c.version)
	}
}
