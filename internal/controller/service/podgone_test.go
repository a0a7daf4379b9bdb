package service

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/model"
)

func TestHeldAddresses(t *testing.T) {
	pod := func(phase corev1.PodPhase, ips ...string) corev1.Pod {
		p := corev1.Pod{Status: corev1.PodStatus{Phase: phase}}
		if len(ips) > 0 {
			p.Status.PodIP = ips[0]
		}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		return p
	}
	amap := []model.AddressMapping{{From: netip.MustParsePrefix("10.9.0.0/16"), To: netip.MustParsePrefix("198.19.0.0/16")}}
	for _, tc := range []struct {
		name string
		pods []corev1.Pod
		amap []model.AddressMapping
		held []string
		free []string
	}{
		{name: "running and pending pods hold their addresses", pods: []corev1.Pod{pod(corev1.PodRunning, "10.4.0.1"), pod(corev1.PodPending, "10.4.0.2")},
			held: []string{"10.4.0.1", "10.4.0.2"}, free: []string{"10.4.0.3"}},
		{name: "a pod in a terminal phase holds none", pods: []corev1.Pod{pod(corev1.PodSucceeded, "10.4.0.1"), pod(corev1.PodFailed, "10.4.0.2")},
			free: []string{"10.4.0.1", "10.4.0.2"}},
		{name: "every address of a dual-stack pod, spelled one way", pods: []corev1.Pod{pod(corev1.PodRunning, "10.4.0.1", "fd00:0::1")},
			held: []string{"10.4.0.1", "fd00::1"}},
		{name: "addresses mapped as the backends are", pods: []corev1.Pod{pod(corev1.PodRunning, "10.9.1.5")}, amap: amap,
			held: []string{"198.19.1.5"}, free: []string{"10.9.1.5"}},
		{name: "no pods", free: []string{"10.4.0.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := heldAddresses(tc.pods, tc.amap)
			for _, a := range tc.held {
				if !got[a] {
					t.Errorf("%s not held: %v", a, got)
				}
			}
			for _, a := range tc.free {
				if got[a] {
					t.Errorf("%s held: %v", a, got)
				}
			}
		})
	}
}

func TestPodStopped(t *testing.T) {
	b := model.Backend{Address: "10.4.0.2", Port: 8080, State: model.Draining}
	listed := map[string]model.Backend{b.ID(): b}
	for _, tc := range []struct {
		name   string
		ipMode bool
		want   map[string]model.Backend
		held   map[string]bool
		stop   bool
	}{
		{name: "gone from the endpoints, no pod holds the address", ipMode: true, stop: true},
		{name: "gone from the endpoints, a pod still holds the address (relabelled, not ready)", ipMode: true,
			held: map[string]bool{"10.4.0.2": true}},
		{name: "still listed (terminating, serving)", ipMode: true, want: listed},
		{name: "node mode: a node's address is no pod's", ipMode: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := podStopped(tc.ipMode, tc.want, tc.held, b); got != tc.stop {
				t.Errorf("podStopped = %v, want %v", got, tc.stop)
			}
		})
	}
}
