package controller

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestMigrateReq(t *testing.T) {
	for _, tc := range []struct {
		data string
		err  error
		want float64
		says string
	}{
		{data: "1\n", want: 1, says: "move to the new pod"},
		{data: "0\n", want: 0, says: "are reset"},
		{err: os.ErrNotExist, want: -1, says: "cannot be read"},
		{err: errors.New("permission denied"), want: -1, says: "permission denied"},
		{data: "2\n", want: -1, says: "neither 0 nor 1"},
	} {
		got, msg := migrateReq([]byte(tc.data), tc.err)
		if got != tc.want || !strings.Contains(msg, tc.says) {
			t.Errorf("%q, %v: %v %q; want %v, saying %q", tc.data, tc.err, got, msg, tc.want, tc.says)
		}
	}
}
