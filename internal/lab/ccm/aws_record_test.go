package ccm_test

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/lab/ccm"
)

// What TestRealAWSCCM reads of the CCM's log and of the emulator's call
// record.

// checkLog: no failed sync in the CCM's log — the service controller's
// "Error syncing load balancer" and the provider's errors of
// EnsureLoadBalancer.
func (w *awsWorld) checkLog(t *testing.T, name string) {
	t.Helper()
	f, err := os.Open(ccm.LogPath(w.base.Dir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		l := sc.Text()
		if strings.Contains(l, "Error syncing load balancer") || strings.Contains(l, "SyncLoadBalancerFailed") ||
			(strings.HasPrefix(l, "E") && strings.Contains(strings.ToLower(l), "ensureloadbalancer")) {
			t.Errorf("%s log: %s", name, l)
		}
	}
}

// logLines counts the lines of the CCM's log that contain s.
func (w *awsWorld) logLines(t *testing.T, name, s string) int {
	t.Helper()
	b, err := os.ReadFile(ccm.LogPath(w.base.Dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), s)
}

// owners maps what identifies a Service's AWS resources in a request —
// its load balancer's ARN and name, its target group's ARN and name — to the
// Service's name.
func owners(nlbs map[string]nlb) map[string]string {
	out := map[string]string{}
	for name, n := range nlbs {
		out[aws.ToString(n.lb.LoadBalancerArn)] = name
		out[aws.ToString(n.lb.LoadBalancerName)] = name
		out[aws.ToString(n.tg.TargetGroupArn)] = name
		out[aws.ToString(n.tg.TargetGroupName)] = name
	}
	return out
}

// writesByOwner counts the accepted writes among calls by the Service
// whose resources a request names (a security group rule by the load
// balancer's name in its description) and by operation; "shared" are
// those naming none.
func writesByOwner(calls []awsapi.Call, owner map[string]string) map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, c := range calls {
		if !c.Write() {
			continue
		}
		who := "shared"
	find:
		for _, vs := range c.Params {
			for _, v := range vs {
				for id, name := range owner {
					if strings.Contains(v, id) {
						who = name
						break find
					}
				}
			}
		}
		if out[who] == nil {
			out[who] = map[string]int{}
		}
		out[who][c.Operation]++
	}
	return out
}

// brief is a call's parameters in one line, the long ones cut.
func brief(c awsapi.Call) string {
	var keys []string
	for k := range c.Params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		v := strings.Join(c.Params[k], ",")
		if len(v) > 90 {
			v = v[:90] + "…"
		}
		fmt.Fprintf(&b, " %s=%s", k, v)
	}
	return b.String()
}
