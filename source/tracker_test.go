package source_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/source"
)

func TestTracker(t *testing.T) {
	t.Parallel()

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		tr := source.NewTracker[int]()
		_, ok := tr.Watermark()
		require.False(t, ok)
		_, ok = tr.WatermarkWith(nil)
		require.False(t, ok)
	})

	t.Run("OutOfOrderCommits", func(t *testing.T) {
		t.Parallel()
		tr := source.NewTracker[int]()
		a, b, c := tr.Track(10), tr.Track(20), tr.Track(30)
		require.Equal(t, 3, tr.InFlight())

		// c's transaction may only store what precedes it, done or not.
		_, ok := tr.WatermarkWith([]source.Ticket{c})
		require.False(t, ok)
		p, ok := tr.WatermarkWith([]source.Ticket{b, a})
		require.True(t, ok)
		require.Equal(t, 20, p)
		_, ok = tr.Watermark()
		require.False(t, ok, "WatermarkWith does not mark")

		_, ok = tr.Done(c)
		require.False(t, ok)
		p, _ = tr.WatermarkWith([]source.Ticket{a})
		require.Equal(t, 10, p, "b is still in flight")
		p, _ = tr.WatermarkWith([]source.Ticket{b, a})
		require.Equal(t, 30, p, "a and b complete the prefix up to the done c")
		p, ok = tr.Done(a)
		require.True(t, ok)
		require.Equal(t, 10, p)
		p, _ = tr.Done(b)
		require.Equal(t, 30, p)
		require.Zero(t, tr.InFlight())
	})

	t.Run("PassMovesPastSkipped", func(t *testing.T) {
		t.Parallel()
		tr := source.NewTracker[int]()
		tr.Pass(5)
		p, ok := tr.Watermark()
		require.True(t, ok)
		require.Equal(t, 5, p, "nothing in flight: a pass is the watermark")

		a := tr.Track(10)
		tr.Pass(15) // a server checkpoint behind an event in flight
		p, _ = tr.Watermark()
		require.Equal(t, 5, p)
		p, _ = tr.WatermarkWith([]source.Ticket{a})
		require.Equal(t, 15, p)
		p, _ = tr.Done(a)
		require.Equal(t, 15, p)
	})

	t.Run("ResetIgnoresOldTickets", func(t *testing.T) {
		t.Parallel()
		tr := source.NewTracker[int]()
		old := tr.Track(10)
		tr.Reset(7, true)
		p, ok := tr.Watermark()
		require.True(t, ok)
		require.Equal(t, 7, p)
		n := tr.Track(8)
		p, _ = tr.Done(old)
		require.Equal(t, 7, p)
		p, _ = tr.Done(n, n)
		require.Equal(t, 8, p)
		tr.Reset(0, false)
		_, ok = tr.Watermark()
		require.False(t, ok)
	})

	// Against a model: the watermark is the last position of the longest
	// done prefix, for random interleavings of track, pass and done.
	t.Run("RandomAgainstModel", func(t *testing.T) {
		t.Parallel()
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, 99))
			tr := source.NewTracker[int]()
			type entry struct {
				pos  int
				tk   source.Ticket
				done bool
			}
			var all []entry
			var open []int // indexes into all of tracked, not done
			pos := 0
			model := func(extra map[source.Ticket]bool) (int, bool) {
				last, ok := 0, false
				for _, e := range all {
					if !e.done && !extra[e.tk] {
						break
					}
					last, ok = e.pos, true
				}
				return last, ok
			}
			for range 500 {
				pos += 1 + rng.IntN(5)
				switch r := rng.IntN(10); {
				case r < 5:
					all = append(all, entry{pos: pos, tk: tr.Track(pos)})
					open = append(open, len(all)-1)
				case r < 6:
					all = append(all, entry{pos: pos, done: true})
					tr.Pass(pos)
				case len(open) > 0:
					// A batch: a few open tickets, in any order.
					rng.Shuffle(len(open), func(i, j int) { open[i], open[j] = open[j], open[i] })
					k := 1 + rng.IntN(min(len(open), 4))
					var tks []source.Ticket
					extra := map[source.Ticket]bool{}
					for _, i := range open[:k] {
						tks = append(tks, all[i].tk)
						extra[all[i].tk] = true
					}
					wp, wok := model(extra)
					gp, gok := tr.WatermarkWith(tks)
					require.Equal(t, wok, gok)
					require.Equal(t, wp, gp)
					for _, i := range open[:k] {
						all[i].done = true
					}
					open = open[k:]
					wp, wok = model(nil)
					gp, gok = tr.Done(tks...)
					require.Equal(t, wok, gok)
					require.Equal(t, wp, gp)
				}
			}
		}
	})
}

func TestTrackerOldestAndLast(t *testing.T) {
	t.Parallel()
	tr := source.NewTracker[int]()
	_, ok := tr.Oldest()
	require.False(t, ok)
	_, n, ok := tr.Last()
	require.False(t, ok)
	require.Zero(t, n)

	a, b := tr.Track(10), tr.Track(20)
	tr.Pass(25)
	p, ok := tr.Oldest()
	require.True(t, ok)
	require.Equal(t, 10, p)
	p, n, ok = tr.Last()
	require.True(t, ok)
	require.Equal(t, 25, p, "a passed position is the last one too")
	require.EqualValues(t, 2, n, "passes are not counted")

	tr.Done(b)
	p, _ = tr.Oldest()
	require.Equal(t, 10, p, "the earliest not done, whatever came after")
	tr.Done(a)
	_, ok = tr.Oldest()
	require.False(t, ok)

	tr.Reset(5, true)
	p, n, ok = tr.Last()
	require.True(t, ok)
	require.Equal(t, 5, p, "Reset's mark")
	require.EqualValues(t, 2, n, "the count never goes back")
}
