//go:build !race

package testutil

// RaceEnabled: see race_on.go.
const RaceEnabled = false
