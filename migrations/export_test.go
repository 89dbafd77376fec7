package migrations

// NewWithFS exposes newWithFS to the external tests, which need a real
// database (through internal/pgtest, which imports this package).
var NewWithFS = newWithFS
