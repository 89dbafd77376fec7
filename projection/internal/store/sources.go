package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Sources is the sources table: how each source's workers map their stream
// to aggregates, recorded when they start.
type Sources struct {
	record, list string
}

func newSources(t qualify) Sources {
	s := t("sources")
	return Sources{
		record: `INSERT INTO ` + s + ` (name, kind, mapping, host, started_at)
VALUES ($1, $2, $3, $4, now())
ON CONFLICT (name) DO UPDATE SET kind = EXCLUDED.kind, mapping = EXCLUDED.mapping, host = EXCLUDED.host,
  started_at = EXCLUDED.started_at`,
		list: `SELECT name, kind, mapping::text, host, started_at FROM ` + s + `
WHERE $1 = '' OR kind = $1 ORDER BY name COLLATE "C"`,
	}
}

// Source is one row of the sources table.
type Source struct {
	Name, Kind string
	// Mapping is the source's JSON description of its mapping.
	Mapping   string
	Host      string
	StartedAt time.Time
}

// Record writes s (StartedAt is the database's now()), replacing the row
// of the same name.
func (s *Sources) Record(ctx context.Context, q querier, src Source) error {
	_, err := q.Exec(ctx, s.record, src.Name, src.Kind, src.Mapping, src.Host)
	return err
}

// List returns the recorded sources by name in byte order; kind, when not
// empty, keeps only the sources of that kind.
func (s *Sources) List(ctx context.Context, q querier, kind string) ([]Source, error) {
	rows, err := q.Query(ctx, s.list, kind)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Source, error) {
		var src Source
		err := row.Scan(&src.Name, &src.Kind, &src.Mapping, &src.Host, &src.StartedAt)
		return src, err
	})
}
