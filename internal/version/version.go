// Package version holds the build's version, set with
// -ldflags "-X zerodrop.dev/zerodrop/internal/version.Version=…".
package version

import "runtime/debug"

// Version of this build.
var Version = "dev"

// String returns the version with the VCS revision when the build has one.
func String() string {
	v := Version
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += "+" + s.Value[:12]
			}
		}
	}
	return v
}
