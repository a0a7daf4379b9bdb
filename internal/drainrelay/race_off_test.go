//go:build !race

package drainrelay

const raceEnabled = false
