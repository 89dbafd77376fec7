package effects

import "github.com/riverqueue/river"

// SubscribeJobs subscribes to the River events of c's jobs (completed,
// cancelled, failed, snoozed), so tests can wait on River's own signals.
func SubscribeJobs(c *Client) (<-chan *river.Event, func()) {
	return c.river.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed, river.EventKindJobSnoozed)
}
