package service

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	for _, tt := range []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"eleven chars", 10, "eleven …"},
		// "ü" is two bytes: a cut at 6 bytes would split the third one.
		{strings.Repeat("ü", 5), 9, "üüü…"},
		{strings.Repeat("ü", 5), 8, "üü…"},
	} {
		got := truncate(tt.in, tt.max)
		if got != tt.want || len(got) > tt.max || !utf8.ValidString(got) {
			t.Errorf("truncate(%q, %d) = %q (%d bytes), want %q", tt.in, tt.max, got, len(got), tt.want)
		}
	}
}
