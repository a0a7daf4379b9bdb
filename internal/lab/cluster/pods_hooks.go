package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/drain"
	"zerodrop.dev/zerodrop/internal/lab/traffic"
)

// preStop runs one container's preStop hook: sleep, exec, or httpGet (the
// zerodrop drain hook among them). ctx ends with the pod's grace period.
// An exec hook of a chart pod runs in its container as the kubelet runs it
// (execProbe: the container's namespaces, working directory and
// environment; at ctx's end its process group is killed, and terminate
// goes on to SIGTERM with the kubelet's 2 s): zerodrop haproxy stop among
// them. Other pods' containers are not processes: their exec hook runs
// only as `sleep N`.
func (r *podRuntime) preStop(ctx context.Context, c *corev1.Container) (result string, failed bool) {
	h := c.Lifecycle.PreStop
	switch {
	case h.Sleep != nil:
		traffic.SleepCtx(ctx, time.Duration(h.Sleep.Seconds)*time.Second)
		return fmt.Sprintf("slept %ds", h.Sleep.Seconds), false
	case h.Exec != nil && r.env.containers != nil && chartPod(r.pod):
		ok, detail := r.execProbe(ctx, c, h.Exec.Command)
		return fmt.Sprintf("exec %q: %s", h.Exec.Command, detail), !ok
	case h.Exec != nil:
		if d, ok := sleepCommand(h.Exec.Command); ok {
			traffic.SleepCtx(ctx, d)
			return "exec sleep " + d.String(), false
		}
		return fmt.Sprintf("exec %q not run", h.Exec.Command), true
	case h.HTTPGet != nil:
		u, err := r.hookURL(c, h.HTTPGet)
		if err != nil {
			return "httpGet: " + err.Error(), true
		}
		code, detail, err := httpGetDetail(ctx, r.client, u, h.HTTPGet.HTTPHeaders)
		if err != nil {
			return fmt.Sprintf("httpGet %s failed: %v", u, err), true
		}
		// A drain call that answers at its deadline let the pod stop
		// without the load balancer having drained it.
		failed = code < 200 || code > 299 || strings.HasPrefix(detail, "timeout")
		return fmt.Sprintf("httpGet %s: %d %s", u, code, detail), failed
	}
	return "no action", false
}

// sleepCommand recognises `sleep N` and `sh -c "sleep N"`.
func sleepCommand(cmd []string) (time.Duration, bool) {
	if len(cmd) == 3 && strings.HasSuffix(cmd[0], "sh") && cmd[1] == "-c" {
		cmd = strings.Fields(cmd[2])
	}
	if len(cmd) != 2 || !strings.HasSuffix(cmd[0], "sleep") {
		return 0, false
	}
	s := strings.TrimSuffix(cmd[1], "s")
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
}

// httpGetDetail sends an httpGet probe's or hook's request, the GET the
// kubelet sends, with the action's httpHeaders (a Host header sets the
// request's host) as the kubelet's lifecycle and prober handlers add them,
// and returns the answer's status and what it said: the drain endpoint's
// result header, or the first line of an error body.
func httpGetDetail(ctx context.Context, hookClient *http.Client, u string, headers []corev1.HTTPHeader) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, "", err
	}
	for _, h := range headers {
		if http.CanonicalHeaderKey(h.Name) == "Host" {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	resp, err := hookClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if r := resp.Header.Get(drain.ResultHeader); r != "" {
		return resp.StatusCode, r + ": " + line, nil
	}
	return resp.StatusCode, line, nil
}
