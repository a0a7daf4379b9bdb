//go:build race

package testutil

// RaceEnabled: the test binary is built with the race detector, which
// slows a process several times over and multiplies its memory; tests that
// assert a time bound or a process' memory run without it (make test runs
// them in a line of their own) and skip under it.
const RaceEnabled = true
