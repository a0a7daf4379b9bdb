package lab

import (
	"slices"
	"testing"

	"zerodrop.dev/zerodrop/internal/lab/report"
)

func TestParseModes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []report.Mode
	}{
		{"all", []report.Mode{report.ModeUpstream, report.ModeRecipe, report.ModeZerodrop}},
		{"zerodrop", []report.Mode{report.ModeZerodrop}},
		{"recipe,upstream", []report.Mode{report.ModeRecipe, report.ModeUpstream}},
		{"upstream, zerodrop,upstream", []report.Mode{report.ModeUpstream, report.ModeZerodrop}},
		{"baseline", nil},
		{"both", nil},
		{"zerodrop,", nil},
	} {
		if got := parseModes(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("parseModes(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
