package aws

import (
	"maps"
	"net/http"
	"testing"

	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
)

func TestCountCalls(t *testing.T) {
	calls := []awsapi.Call{
		{Operation: "DescribeLoadBalancers", Status: http.StatusOK},
		{Operation: "DescribeLoadBalancers", Status: http.StatusBadRequest, Error: "LoadBalancerNotFound"},
		{Operation: "CreateLoadBalancer", Status: http.StatusOK},
		{Operation: "ModifyTargetGroup", Status: http.StatusOK},
		{Operation: "ModifyTargetGroup", Status: http.StatusOK},
		{Operation: "RegisterTargets", Status: http.StatusBadRequest, Error: "Throttling"},
	}
	writes, reads, refused := countCalls(calls)
	if want := map[string]int{"CreateLoadBalancer": 1, "ModifyTargetGroup": 2}; !maps.Equal(writes, want) {
		t.Errorf("writes %v, want %v (a refused write is not one)", writes, want)
	}
	if reads != 1 {
		t.Errorf("reads %d, want 1 (a refused read is not one)", reads)
	}
	if want := map[string]int{"LoadBalancerNotFound": 1, "Throttling": 1}; !maps.Equal(refused, want) {
		t.Errorf("refused %v, want %v", refused, want)
	}
}

func TestStretches(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mark, end int
		stops     []stopAt
		want      []stretch
	}{
		{"no stop", 10, 20, nil, nil},
		{"two stops", 10, 20, []stopAt{{"SIGKILL", 12}, {"SIGTERM", 15}},
			[]stretch{{"SIGKILL", 2, 5}, {"SIGTERM", 5, 10}}},
		// A stop marked before the act's mark starts at the act's start.
		{"stop before the mark", 10, 20, []stopAt{{"SIGKILL", 8}}, []stretch{{"SIGKILL", 0, 10}}},
		{"stop at the end", 10, 20, []stopAt{{"SIGKILL", 20}}, []stretch{{"SIGKILL", 10, 10}}},
	} {
		got := stretches(tc.mark, tc.end, tc.stops)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			}
		}
	}
}

// TestCallsByCaller: the CCM's and zerodrop's calls are told apart by the
// key that signed them, and every call of zerodrop's other than a
// Describe counts as a write, refused or not.
func TestCallsByCaller(t *testing.T) {
	calls := []awsapi.Call{
		{Operation: "DescribeTargetHealth", Status: http.StatusOK, Caller: awsapi.SecondAccessKeyID},
		{Operation: "DescribeTargetHealth", Status: http.StatusOK, Caller: awsapi.SecondAccessKeyID},
		{Operation: "DescribeLoadBalancers", Status: http.StatusBadRequest, Error: "Throttling", Caller: awsapi.SecondAccessKeyID},
		{Operation: "ModifyTargetGroup", Status: http.StatusOK, Caller: awsapi.AccessKeyID},
		{Operation: "DeregisterTargets", Status: http.StatusForbidden, Error: "AccessDenied", Caller: awsapi.SecondAccessKeyID},
	}
	ccmWrites, _, _ := countCalls(byCaller(calls, awsapi.AccessKeyID))
	if want := map[string]int{"ModifyTargetGroup": 1}; !maps.Equal(ccmWrites, want) {
		t.Errorf("the CCM's writes %v, want %v", ccmWrites, want)
	}
	zd := callsOf(byCaller(calls, awsapi.SecondAccessKeyID))
	if want := map[string]int{"DeregisterTargets": 1}; !maps.Equal(zd.Writes, want) {
		t.Errorf("zerodrop's writes %v, want %v (a refused write is still one it tried)", zd.Writes, want)
	}
	if want := map[string]int{"DescribeTargetHealth": 2, "DescribeLoadBalancers": 1}; !maps.Equal(zd.Reads, want) {
		t.Errorf("zerodrop's reads %v, want %v", zd.Reads, want)
	}
	if want := map[string]int{"Throttling": 1, "AccessDenied": 1}; !maps.Equal(zd.Refused, want) {
		t.Errorf("zerodrop's refused calls %v, want %v", zd.Refused, want)
	}
}
