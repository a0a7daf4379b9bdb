package service

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"zerodrop.dev/zerodrop/internal/model"
)

// TestKeepInvalid: an invalid Service's listener keeps its observed
// settings; its backends come from held when held has the listener (the
// endpoints), else they stay as observed (an invalid backend mode).
func TestKeepInvalid(t *testing.T) {
	listener := func(name string, interval int32, addrs ...string) model.Listener {
		l := model.Listener{Name: name, Address: "127.0.101.1", Port: 80, Protocol: model.TCP,
			Probe: model.Probe{Kind: model.ProbeTCP, IntervalMillis: interval, Rise: 2, Fall: 3}}
		for _, a := range addrs {
			l.Backends = append(l.Backends, model.Backend{Address: a, Port: 8080, Weight: model.DefaultWeight, State: model.Active})
		}
		return l
	}
	observed := &model.LoadBalancer{Key: "k", Listeners: []model.Listener{
		listener("ns/a/tcp-80", 500, "10.0.0.1", "10.0.0.2"),
		listener("ns/b/tcp-80", 500, "10.0.1.1"),
	}}
	invalid := map[*corev1.Service]error{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}: errors.New("bad interval"),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}}: errors.New("bad mode"),
	}
	// Only a is held: its desired listener has the default interval and new endpoints.
	held := &model.LoadBalancer{Key: "k", Listeners: []model.Listener{listener("ns/a/tcp-80", 2000, "10.0.0.2", "10.0.0.3")}}
	got := keepInvalid(&model.LoadBalancer{Key: "k"}, observed, invalid, held)
	want := []string{
		"ns/a/tcp-80 interval=500 [10.0.0.2:8080 10.0.0.3:8080]",
		"ns/b/tcp-80 interval=500 [10.0.1.1:8080]",
	}
	var gotS []string
	for _, l := range got.Listeners {
		var ids []string
		for _, b := range l.Backends {
			ids = append(ids, b.ID())
		}
		gotS = append(gotS, fmt.Sprintf("%s interval=%d %v", l.Name, l.Probe.IntervalMillis, ids))
	}
	if fmt.Sprint(gotS) != fmt.Sprint(want) {
		t.Errorf("keepInvalid =\n%v\nwant\n%v", gotS, want)
	}
}
