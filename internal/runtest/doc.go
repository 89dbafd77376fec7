// Package runtest holds the waiting the sources' tests share: a coalescing
// Signal that hooks notify and tests wait on (WaitFor), a Signal that fires
// on a clock for what no hook covers (Ticks), and a source run in the
// background until the test ends (Start, Background.Stop).
package runtest
