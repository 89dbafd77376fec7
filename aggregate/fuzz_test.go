package aggregate_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/inorder/inorder/aggregate"
)

// FuzzValidate feeds arbitrary bytes to every envelope field: Validate never
// panics, returns nil or a *ValidationError (with a known reason), and what
// it accepts is what PostgreSQL's text can hold within the limits.
//
//	go test -run '^$' -fuzz FuzzValidate -fuzztime 1m ./aggregate/
func FuzzValidate(f *testing.F) {
	f.Add("pay-1", int64(1), "", "payment.authorized", []byte(`{"amount":1}`), []byte(nil))
	f.Add("pay\x00-1", int64(0), "id\xff", "", []byte(`{`), []byte(`nope`))
	f.Add(strings.Repeat("\xf0\x9f\x98", 400), int64(-1), strings.Repeat("x", 600), "t\x00", []byte(`"\xff"`), []byte(`{}`))
	f.Add("a", int64(1<<62), "a:1", "t", []byte(` 1 `), []byte(` `))
	f.Fuzz(func(t *testing.T, agg string, version int64, id, typ string, data, meta []byte) {
		e := aggregate.Event{Aggregate: agg, Version: version, ID: id, Type: typ, Data: data, Metadata: meta}
		err := e.Validate(nil)
		if err != nil {
			var ve *aggregate.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("not a *ValidationError: %T %v", err, err)
			}
			if ve.Reason() == "invalid" || len(ve.Problems) == 0 || ve.Problems[0] != ve.Err {
				t.Fatalf("bad validation error: %#v", ve)
			}
			return
		}
		for _, s := range []string{agg, e.StableID(), typ} {
			if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
				t.Fatalf("accepted text PostgreSQL cannot store: %q", s)
			}
		}
		if agg == "" || typ == "" || version < 1 || len(agg) > aggregate.DefaultMaxAggregateLen ||
			len(id) > aggregate.DefaultMaxIDLen || len(typ) > aggregate.DefaultMaxTypeLen {
			t.Fatalf("accepted %+v", e)
		}
		if !json.Valid(data) || (len(meta) > 0 && !json.Valid(meta)) {
			t.Fatalf("accepted invalid JSON: %q %q", data, meta)
		}
	})
}
