package source

// WorkerOf exposes workerOf to the package's external tests.
var WorkerOf = workerOf
