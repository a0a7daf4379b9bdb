package lab

import (
	"os"
	"testing"
)

// longLabEnv enables the lab tests `make test` leaves out for its time
// (each is a capability that keeps a shorter smoke in `make test`):
// `make test-long` runs them, with the other lab tests an environment
// variable enables (ZERODROP_LAB_AWS, ZERODROP_LAB_BGP_*).
const longLabEnv = "ZERODROP_LAB_LONG"

// skipUnlessLong skips a long lab test unless longLabEnv is set.
func skipUnlessLong(t *testing.T) {
	t.Helper()
	if os.Getenv(longLabEnv) == "" {
		t.Skipf("a long lab test: `make test-long` runs it (or set %s=1)", longLabEnv)
	}
}
