package sourceutil

import "sync"

// Keep records the outcome of a lag measurement under mu: on success the
// new figures m replace *last; on failure *last keeps the figures of the
// measurement before, and failed notes err on them. It returns *last as
// recorded.
func Keep[M any](mu *sync.Mutex, last *M, m M, err error, failed func(last *M, err error)) M {
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		failed(last, err)
	} else {
		*last = m
	}
	return *last
}
