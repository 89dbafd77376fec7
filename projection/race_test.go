//go:build race

package projection_test

// raceEnabled tells whether the race detector is on: it slows the client
// several times over, which latency bounds allow for.
const raceEnabled = true
