package sourceutil

import (
	"errors"
	"sync"
	"testing"

	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

func TestProcessedSkipsRejected(t *testing.T) {
	a, b, c := &source.Delivery{}, &source.Delivery{Reject: errors.New("bad")}, &source.Delivery{}
	results := []projection.Result{{Outcome: projection.Applied}, {Outcome: projection.Duplicate}}
	var got []projection.Outcome
	for d, r := range Processed([]*source.Delivery{a, b, c}, results) {
		if d == b {
			t.Fatal("a rejected delivery was yielded")
		}
		got = append(got, r.Outcome)
	}
	if len(got) != 2 || got[0] != projection.Applied || got[1] != projection.Duplicate {
		t.Fatalf("outcomes %v", got)
	}
}

func TestKeep(t *testing.T) {
	var mu sync.Mutex
	last := source.Lag{Events: 1}
	failed := func(l *source.Lag, err error) { l.Err = err.Error() }
	if got := Keep(&mu, &last, source.Lag{Events: 2}, nil, failed); got.Events != 2 || last.Events != 2 {
		t.Fatalf("kept %+v, last %+v", got, last)
	}
	if got := Keep(&mu, &last, source.Lag{Events: 3}, errors.New("down"), failed); got.Events != 2 || got.Err != "down" {
		t.Fatalf("after a failure %+v", got)
	}
}

func TestDispatchDefaults(t *testing.T) {
	d := Dispatch{}.Defaults()
	if d.Workers != source.DefaultWorkers || d.BatchSize != source.DefaultBatchSize || d.MaxWait != source.DefaultMaxWait ||
		d.ReadAhead != source.DefaultWindow(d.Workers, d.BatchSize) || d.Logger == nil {
		t.Fatalf("defaults %+v", d)
	}
	if c := (Dispatch{Workers: 2, BatchSize: 3, ReadAhead: 7}).Defaults().Config(nil, "x"); c.Source != "x" || c.Workers != 2 || c.MaxInFlight != 7 {
		t.Fatalf("config %+v", c)
	}
}
