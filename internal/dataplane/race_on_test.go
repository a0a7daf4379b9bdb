//go:build race

package dataplane

// raceEnabled: the race detector slows the flood's churn and the TLS
// handshakes several times over, so time bounds are logged, not asserted.
const raceEnabled = true
