//go:build !race

package projection_test

// raceEnabled tells whether the race detector is on (see race_test.go).
const raceEnabled = false
