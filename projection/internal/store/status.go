package store

import "github.com/jackc/pgx/v5"

// This file holds the status view's reads, which count the rows of several
// gate tables in one statement.

// Status holds the status view's reads across the gate tables.
type Status struct {
	projectionCounts string
}

func newStatus(t qualify) Status { return Status{projectionCounts: projectionCounts(t)} }

// QueueProjectionCounts queues, for each of names (projection names, in
// order), its live generation's gate key and counts: rows of (name, gate
// key, aggregates, the sum of their versions at most max, quarantined,
// open conflicts, acknowledged conflicts). noTotals leaves the aggregates
// and the sum 0 (their scan is the view's cost).
func (s *Status) QueueProjectionCounts(b *pgx.Batch, names []string, max int64, noTotals bool) *pgx.QueuedQuery {
	return b.Queue(s.projectionCounts, names, max, noTotals)
}

func projectionCounts(t qualify) string {
	return `WITH n AS (SELECT n.name, n.ord, coalesce(g.key, n.name) AS key
  FROM unnest($1::text[]) WITH ORDINALITY AS n(name, ord)
  LEFT JOIN ` + t("generations") + ` g ON g.projection = n.name AND g.state = 'live')
SELECT n.name, n.key, coalesce(v.aggs, 0), coalesce(v.events, 0),
  coalesce(q.n, 0), coalesce(c.open, 0), coalesce(c.acked, 0)
FROM n
LEFT JOIN (SELECT projection, count(*) AS aggs,
    least(sum(version::numeric), $2::numeric)::bigint AS events
  FROM ` + t("versions") + ` WHERE projection IN (SELECT key FROM n) AND NOT $3 GROUP BY projection) v ON v.projection = n.key
LEFT JOIN (SELECT projection, count(*) AS n
  FROM ` + t("quarantine") + ` WHERE projection IN (SELECT key FROM n) GROUP BY projection) q ON q.projection = n.key
LEFT JOIN (SELECT projection, count(*) FILTER (WHERE acked_at IS NULL) AS open,
    count(*) FILTER (WHERE acked_at IS NOT NULL) AS acked
  FROM ` + t("conflicts") + ` WHERE projection IN (SELECT key FROM n) GROUP BY projection) c ON c.projection = n.key
ORDER BY n.ord`
}

// QueueCounts queues the count of rejected deliveries: one row of (total,
// pending).
func (r *Rejected) QueueCounts(b *pgx.Batch) *pgx.QueuedQuery { return b.Queue(r.counts) }
