//go:build race

package dataplane

// raceEnabled: the race detector slows the flood's churn and the TLS
// handshakes several times over, so the flood test runs without it.
const raceEnabled = true
