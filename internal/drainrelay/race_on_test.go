//go:build race

package drainrelay

// raceEnabled: the race detector multiplies a process's memory several
// times over, so the relay's memory test runs without it.
const raceEnabled = true
