package console

import (
	"sync"
	"time"

	"github.com/inorder/inorder/projection"
)

// builds holds the rebuilds this process started from the console, by
// projection: their last progress report and outcome.
type builds struct {
	mu sync.Mutex
	by map[string]*buildState
}

// buildState is one rebuild started here.
type buildState struct {
	Projection string
	By         string
	Started    time.Time
	Progress   projection.BuildProgress
	Done       bool
	Err        string
}

func newBuilds() *builds { return &builds{by: map[string]*buildState{}} }

// get returns a copy of the projection's state, nil if none.
func (b *builds) get(name string) *buildState {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.by[name]
	if s == nil {
		return nil
	}
	c := *s
	return &c
}

// start records a rebuild as started, unless one runs: ok is false then.
func (b *builds) start(name, by string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.by[name]; s != nil && !s.Done {
		return false
	}
	b.by[name] = &buildState{Projection: name, By: by, Started: time.Now(), Progress: projection.BuildProgress{Fraction: -1}}
	return true
}

func (b *builds) progress(name string, p projection.BuildProgress) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.by[name]; s != nil {
		s.Progress = p
	}
}

func (b *builds) finish(name string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.by[name]; s != nil {
		s.Done = true
		if err != nil {
			s.Err = err.Error()
		}
	}
}
