package azurewrites

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/controller/service"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/lab/ctrlmetrics"
	"zerodrop.dev/zerodrop/internal/lab/report"
	"zerodrop.dev/zerodrop/internal/provider"
	"zerodrop.dev/zerodrop/internal/supervisor"
)

// The emulator lab's kill-mid-plan runs its controllers as processes, so
// that the writer it kills is SIGKILLed: `zerodrop lab azure-controller`
// is the command's own wiring (controller.RunConfig, what `zerodrop
// controller --provider azure` runs) with only the ARM endpoint and
// credential replaced by the emulator's, served over HTTP on loopback by
// the lab process (azurearm.Handler). The lab reads each process's figures
// from its metrics endpoint and the Warning Events from the API server.

// azureCommand is the lab subcommand of an Azure controller process.
const AzureCommand = "azure-controller"

// azureControllerMain is `zerodrop lab azure-controller --emulator=URL
// --emulator-ca=FILE CONTROLLER-FLAGS…`.
func AzureControllerMain(args []string, stderr io.Writer) int {
	if len(args) < 2 || !strings.HasPrefix(args[0], "--emulator=") || !strings.HasPrefix(args[1], "--emulator-ca=") {
		fmt.Fprintln(stderr, "zerodrop lab azure-controller: want --emulator=URL --emulator-ca=FILE, then the controller's flags")
		return 2
	}
	cfg, err := controller.ParseArgs(args[2:])
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop lab azure-controller: %v\n", err)
		return 2
	}
	caPEM, err := os.ReadFile(strings.TrimPrefix(args[1], "--emulator-ca="))
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop lab azure-controller: %v\n", err)
		return 2
	}
	if cfg.Azure.Credential, cfg.Azure.ClientOptions, err = azurearm.Remote(strings.TrimPrefix(args[0], "--emulator="), caPEM, zerodropIdentity); err != nil {
		fmt.Fprintf(stderr, "zerodrop lab azure-controller: %v\n", err)
		return 2
	}
	cfg.LogOutput = stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := controller.RunConfig(ctx, cfg); err != nil {
		fmt.Fprintf(stderr, "zerodrop lab azure-controller: %v\n", err)
		return 1
	}
	return 0
}

// runIn runs the scenario with the run's emulator served over HTTPS, the
// one endpoint every writer uses (upstream's cloud-controller-manager
// processes, zerodrop in the lab process and kill-mid-plan's zerodrop
// processes); the logs and files are kept in a directory (named) if the run
// fails.
func (r *azureRun) runIn(ctx context.Context, scenario string) (report.Result, error) {
	dir, err := os.MkdirTemp("", "zerodrop-azure-lab-")
	if err != nil {
		return report.Result{Scenario: scenario, Mode: string(r.mode)}, err
	}
	if err := r.serveEmulator(dir); err != nil {
		_ = os.RemoveAll(dir)
		return report.Result{Scenario: scenario, Mode: string(r.mode)}, err
	}
	r.procs.asProcesses = asProcesses(scenario)
	res, err := r.run(ctx, scenario) // stops every process before it returns
	_ = r.procs.served.Close()
	if err != nil {
		r.progress("%s: controller logs kept in %s", r.ns, dir)
	} else {
		_ = os.RemoveAll(dir)
	}
	return res, err
}

// asProcesses reports whether the scenario runs zerodrop's controllers as
// processes of their own: kill-mid-plan SIGKILLs them, restart-idle stops
// them, churn counts their error log lines.
func asProcesses(scenario string) bool {
	return scenario == report.ScenarioKillMidPlan || scenario == ScenarioRestartIdle || scenario == ScenarioChurn
}

// zerodropIdentity names zerodrop's requests in the emulator's record.
const zerodropIdentity = "zerodrop"

// azureProcs is the emulator as served to a run, and what its processes
// need to reach it and the API server.
type azureProcs struct {
	dir, kubeconfig string
	served          *azurearm.Served
	// asProcesses runs zerodrop's controllers as processes of their own
	// (kill-mid-plan), not in the lab process.
	asProcesses bool
}

// serveEmulator serves the run's emulator over HTTPS on a loopback port,
// and writes the authority to trust and a kubeconfig for its processes
// into dir.
func (r *azureRun) serveEmulator(dir string) error {
	served, err := r.emu.ServeTLS(filepath.Join(dir, "emulator-ca.pem"))
	if err != nil {
		return err
	}
	server := r.cfg.Host
	if !strings.Contains(server, "://") {
		server = "https://" + server
	}
	kc, err := cluster.WriteKubeconfig(r.cfg, server, filepath.Join(dir, "kubeconfig"))
	if err != nil {
		_ = served.Close()
		return err
	}
	r.procs = &azureProcs{dir: dir, kubeconfig: kc, served: served}
	return nil
}

// startProcess starts a zerodrop controller process with start's settings
// and the production defaults for everything start does not set.
func (r *azureRun) startProcess(leaderElect bool) (*azureInstance, error) {
	p := r.procs
	port, err := freeLoopbackPort()
	if err != nil {
		return nil, err
	}
	n := len(r.instances) + 1
	args := []string{"lab", AzureCommand, "--emulator=" + p.served.URL, "--emulator-ca=" + p.served.CAFile,
		"--provider=azure", "--kubeconfig=" + p.kubeconfig, "--load-balancer-class=" + r.class(),
		"--azure-subscription-id=" + azureSub, "--azure-resource-group=" + azureGroup,
		"--azure-load-balancers=" + strings.Join(r.lbNames(), ","), "--azure-subnet-id=" + azureSubnet,
		"--azure-location=westeurope", "--resync-period=1h",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port), "--health-probe-bind-address=0", "--drain-bind-address=0",
		fmt.Sprintf("--leader-elect=%t", leaderElect), "--leader-election-namespace=" + r.ns, "--leader-election-id=zerodrop-lab-azure",
		"--lease-duration=" + azureLease.String(), "--renew-deadline=" + azureRenew.String(), "--retry-period=" + azureRetryPeriod.String(),
	}
	logPath := filepath.Join(p.dir, fmt.Sprintf("controller-%d.log", n))
	proc, err := supervisor.Start(supervisor.Spec{Name: r.opts.Executable, Args: args,
		Env: append(os.Environ(), cluster.ChildEnv+"=controller"), Log: logPath, DieWithParent: true})
	if err != nil {
		return nil, fmt.Errorf("controller process: %w", err)
	}
	pr := &azureProc{proc: proc, log: logPath,
		metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", port),
		client:     &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}}
	in := &azureInstance{leaderElect: leaderElect, proc: pr, done: make(chan error, 1), stopLimit: r.waitLimit()}
	// The instance's own stop, bounded by its stopLimit (instance.go),
	// not the supervisor's grace.
	in.cancel = func() { proc.Signal(syscall.SIGTERM) }
	go func() {
		err := proc.Wait()
		in.exited.Store(true)
		in.done <- err
	}()
	r.instances = append(r.instances, in)
	return in, nil
}

// freeLoopbackPort is a TCP port free on 127.0.0.1 a moment ago.
func freeLoopbackPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// azureProc is a controller process: its figures come from its metrics
// endpoint; a process that no longer answers keeps its last ones.
type azureProc struct {
	proc       *supervisor.Process
	log        string
	metricsURL string
	client     *http.Client

	mu   sync.Mutex
	last ctrlmetrics.Counters
}

// scrape returns the process's counters and whether it leads, read now
// or, if it has exited or does not answer, the last ones read (a dead
// process leads no more; its port may be another's by now).
func (p *azureProc) scrape(exited bool) (ctrlmetrics.Counters, bool) {
	if exited {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.last, false
	}
	c, leader, err := ctrlmetrics.FetchMetrics(p.client, p.metricsURL)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		return p.last, false
	}
	p.last = c
	return c, leader
}

// kill SIGKILLs the process group: no lease released, no request finished.
func (p *azureProc) kill() { p.proc.Kill() }

// apiWarnings counts the Warning Events in the run's namespace (each
// occurrence of a series), and those that surfaced a conflict. A process
// SIGKILLed may die with Events it recorded not yet sent.
func (r *azureRun) apiWarnings() (warnings, surfaced int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var list eventsv1.EventList
	if err := r.c.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
		r.countErr = fmt.Errorf("count Warning Events: %w", err)
		return 0, 0
	}
	for _, e := range list.Items {
		if e.Type != "Warning" {
			continue
		}
		n := int64(1)
		if e.Series != nil && e.Series.Count > 1 {
			n = int64(e.Series.Count)
		}
		warnings += n
		if e.Reason == service.ReasonSyncFailed && strings.Contains(e.Note, provider.ErrConflict.Error()) {
			surfaced += n
		}
	}
	return warnings, surfaced
}

// procsGone fails a wait whose controller processes have all ended on
// their own (none killed or stopped by the lab is left running): nothing
// can converge any more. The last lines of one's log say why.
func (r *azureRun) procsGone() error {
	if r.procs == nil || !r.procs.asProcesses {
		return nil
	}
	var last *azureInstance
	for _, in := range r.instances {
		if !in.exited.Load() {
			return nil
		}
		if !in.stopped.Load() {
			last = in
		}
	}
	if last == nil {
		return nil
	}
	tail, _ := os.ReadFile(last.proc.log)
	if len(tail) > 2000 {
		tail = tail[len(tail)-2000:]
	}
	return fmt.Errorf("every controller process has exited; %s ends: %s", filepath.Base(last.proc.log), tail)
}
