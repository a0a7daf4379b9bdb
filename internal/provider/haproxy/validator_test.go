package haproxy

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"zerodrop.dev/zerodrop/internal/model"
	"zerodrop.dev/zerodrop/internal/provider"
)

// logWrapper writes an executable that appends "run <args>" to calls and
// then runs HAProxy (the real one) with its arguments, unless the
// configuration it checks (the last argument of `-c -f FILE`) contains
// refuse: then it says no as HAProxy does, with an alert. HAProxy itself
// refuses at -c only what the renderer never writes, so the refusal of a
// rendered configuration is this wrapper's.
func logWrapper(t *testing.T, dir, name, calls, refuse string) string {
	t.Helper()
	real, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("no haproxy")
	}
	wrapper := filepath.Join(dir, name)
	script := "#!/bin/sh\necho \"run $*\" >> " + calls + "\n"
	if refuse != "" {
		script += "for f; do :; done\nif [ \"$1\" = -c ] && grep -qF '" + refuse + "' \"$f\"; then echo \"[ALERT]    (1) : config : refused by the test: " + refuse + "\" >&2; exit 1; fi\n"
	}
	script += "exec " + real + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper
}

func callsOf(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

func checksIn(calls []string) int {
	n := 0
	for _, c := range calls {
		if c == "-c" {
			n++
		}
	}
	return n
}

// TestValidationInHAProxyContainer is the data-plane pod's arrangement of
// the checks: HAProxy runs as its container does (ContainerArgs) with the
// validator beside it (ServeValidation, as `zerodrop haproxy` starts it),
// and the attached Provider, given the validation socket, has every
// configuration checked there — it runs no HAProxy of its own, so a
// check's memory is never its container's. A configuration HAProxy refuses
// there is a refusal with HAProxy's reason, and changes nothing; a group
// with a refused member is told apart and the others served; a file
// outside the state directory is not checked; with the validator gone a
// reload fails (retried) without a refusal and without a check of its own.
func TestValidationInHAProxyContainer(t *testing.T) {
	ctx := testContext(t)
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "haproxy")
	if err := PrepareContainer(Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	containerHAProxy(t, dir)
	ownCalls, checkerCalls := filepath.Join(tmp, "controller-calls"), filepath.Join(tmp, "validator-calls")
	const refusedKey = "default/refused-by-check"
	ln, err := ListenValidation(dir)
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stopServing := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- ServeValidation(serveCtx, ln, logWrapper(t, tmp, "validator-haproxy", checkerCalls, encodeName(refusedKey)), dir, testr.New(t))
	}()
	t.Cleanup(func() { stopServing(); <-served })

	admin, master, config, err := Paths(dir)
	if err != nil {
		t.Fatal(err)
	}
	var c counter
	p, err := New(ctx, Options{AdminSocket: admin, MasterSocket: master, ConfigFile: config,
		ValidateSocket: ValidationSocket(dir), Binary: logWrapper(t, tmp, "controller-haproxy", ownCalls, ""),
		Hooks: c.hooks(), Log: testr.New(t), ReloadTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}

	bs := startBackends(t, 2, "127.0.45")
	const lbAddr = "127.0.0.75"
	lbOf := func(key string) *model.LoadBalancer {
		return &model.LoadBalancer{Key: key, Listeners: []model.Listener{listenerOf(key, "tcp-80", lbAddr, freePort(t, lbAddr), bs)}}
	}
	first := lbOf("default/checked")
	applyDiff(t, p, first)
	if n := checksIn(callsOf(t, checkerCalls)); n < 1 {
		t.Fatalf("the reload's configuration was checked %d times by the validator, want at least once", n)
	}

	// Refused in the validator: HAProxy's reason, nothing changed.
	worker := workerPID(t, p)
	before, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	c.take()
	err = p.reload(ctx, []byte("global\n    no-such-keyword 1\n"), nil)
	if !errors.Is(err, errRejected) || !strings.Contains(err.Error(), "no-such-keyword") {
		t.Errorf("a configuration HAProxy refuses: %v; want a refusal that says why", err)
	}
	if writes, _ := c.take(); len(writes) != 0 {
		t.Errorf("a refused configuration wrote %v", writes)
	}
	if after, err := os.ReadFile(config); err != nil || string(after) != string(before) {
		t.Errorf("a refused configuration changed the configuration file (%v)", err)
	}
	if got := workerPID(t, p); got != worker {
		t.Errorf("a refused configuration changed the worker %d → %d", worker, got)
	}

	// A group with a member the check refuses: it alone fails.
	ops := []groupOp{{key: refusedKey, lb: lbOf(refusedKey)}}
	for _, key := range []string{"default/g-0", "default/g-1", "default/g-2", "default/g-3"} {
		ops = append(ops, groupOp{key: key, lb: lbOf(key)})
	}
	errs := runConcurrently(t, p, ops)
	for i, op := range ops {
		if bad := i == 0; bad != (errs[i] != nil) || bad && !errors.Is(errs[i], provider.ErrRefused) {
			t.Errorf("%s: %v", op.key, errs[i])
		}
		if got := observe(t, p, op.key); i > 0 && lbDiff(op.lb, got) != "" {
			t.Errorf("%s not served after its group's refusal was told apart: %s", op.key, lbDiff(op.lb, got))
		} else if i == 0 && got != nil && len(got.Listeners) > 0 {
			t.Errorf("the refused member is served: %+v", got)
		}
	}
	if cfg, _ := os.ReadFile(config); strings.Contains(string(cfg), encodeName(refusedKey)) {
		t.Error("the refused member is in the configuration file")
	}

	// Only files of the state directory are checked.
	if err := validateAt(ctx, ValidationSocket(dir), "/etc/passwd"); err == nil || errors.Is(err, errRejected) {
		t.Errorf("a file outside the state directory: %v; want an error that is not a refusal", err)
	}

	// The validator gone: no reload, no refusal, no check of its own.
	stopServing()
	<-served
	served <- nil
	err = p.Apply(ctx, model.Diff(observe(t, p, "default/late"), lbOf("default/late")))
	if err == nil || errors.Is(err, provider.ErrRefused) {
		t.Errorf("a reload without its validator: %v; want an error that is not a refusal", err)
	}
	if got := observe(t, p, "default/late"); got != nil && len(got.Listeners) > 0 {
		t.Error("reloaded without a check")
	}

	if calls := callsOf(t, ownCalls); len(calls) > 0 {
		t.Errorf("the attached Provider ran HAProxy itself (%v): a check in its own container", calls)
	}
}
