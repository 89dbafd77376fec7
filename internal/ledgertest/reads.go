package ledgertest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/httpapi"
)

// Folds is each payment's in-order fold at every version: what a whole
// read of it at that version is, and nothing else. Its zero value is
// empty; it is safe for concurrent use, so that events can be added as
// they are appended while readers check reads against it.
type Folds struct {
	mu  sync.Mutex
	ids []string
	by  map[string][]paymentAt
}

type paymentAt struct {
	payment ledger.Payment
	legs    []ledger.Leg
}

// Add folds events in, each payment's versions in order (as Generate
// gives them).
func (f *Folds) Add(events []aggregate.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.by == nil {
		f.by = map[string][]paymentAt{}
	}
	for _, ev := range events {
		folds, ok := f.by[ev.Aggregate]
		if !ok {
			f.ids = append(f.ids, ev.Aggregate)
			folds = []paymentAt{{}}
		}
		var prev *ledger.Payment
		var legs []ledger.Leg
		if last := folds[len(folds)-1]; len(folds) > 1 {
			prev, legs = &last.payment, last.legs
		}
		next, ls, err := ledger.Step(prev, ev)
		if err != nil {
			return err
		}
		f.by[ev.Aggregate] = append(folds, paymentAt{payment: *next, legs: append(slices.Clone(legs), ls...)})
	}
	return nil
}

// ReadAny reads a payment picked by rng through the HTTP API at base and
// checks that the read is exactly the payment's in-order fold at the
// version it reports, and not older than the version this reader saw last
// (seen, the reader's own). It reports false for a payment not applied yet.
func (f *Folds) ReadAny(ctx context.Context, client *http.Client, base string, rng *rand.Rand, seen map[string]int64) (bool, error) {
	f.mu.Lock()
	id := f.ids[rng.IntN(len(f.ids))]
	want := f.by[id]
	f.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/projections/ledger/aggregates/"+id, nil)
	if err != nil {
		return false, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", id, err)
	}
	var body struct {
		Version int64 `json:"version"`
		Data    struct {
			ledger.Payment
			Legs []ledger.Leg `json:"legs"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return false, nil
	case resp.StatusCode != http.StatusOK:
		return false, fmt.Errorf("read %s: status %d", id, resp.StatusCode)
	case err != nil:
		return false, fmt.Errorf("read %s: %w", id, err)
	}
	hv, _ := strconv.ParseInt(resp.Header.Get(httpapi.VersionHeader), 10, 64)
	switch {
	case body.Version < 1 || body.Version >= int64(len(want)):
		return false, fmt.Errorf("read %s: version %d of %d appended", id, body.Version, len(want)-1)
	case hv != body.Version || body.Data.Version != body.Version:
		return false, fmt.Errorf("read %s: header version %d, response %d, payment %d", id, hv, body.Version, body.Data.Version)
	case body.Data.Payment != want[body.Version].payment:
		return false, fmt.Errorf("read %s at version %d: %+v, the fold gives %+v", id, body.Version, body.Data.Payment, want[body.Version].payment)
	case !slices.Equal(body.Data.Legs, want[body.Version].legs):
		return false, fmt.Errorf("read %s at version %d: legs %+v, the fold gives %+v", id, body.Version, body.Data.Legs, want[body.Version].legs)
	case body.Version < seen[id]:
		return false, fmt.Errorf("read %s: version %d after %d", id, body.Version, seen[id])
	}
	seen[id] = body.Version
	return true, nil
}
