package upstream

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// Lease settings of cloud-controller-manager (and kube-controller-manager)
// by default: k8s.io/component-base/config/v1alpha1 defaults.go.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Main is the lab's cloud-controller-manager, reduced to its service
// controller: `zerodrop lab upstream-controller …`, run by the lab as a
// controller pod so that it can be killed and restarted as a process.
//
// It does what k8s.io/cloud-provider/app (the cloud-controller-manager every
// out-of-tree cloud, cloud-provider-azure among them, is built on) does
// around that controller, and nothing more:
//   - leader election on a Lease with the default settings above, identity
//     hostname + "_" + a UUID (controllermanager.go, Run);
//   - leaderElectAndRun runs with context.TODO() and no ReleaseOnCancel, and
//     the command runs until wait.NeverStop (sample/basic_main.go): SIGTERM
//     ends the process without releasing the lease, as SIGKILL does, so a
//     successor waits for the lease to expire. This process installs no
//     signal handler either;
//   - losing the lease exits with status 1 (OnStoppedLeading).
//
// It serves leader_election_master_status on --metrics-bind-address, the
// gauge kube-controller-manager exports, so that the lab finds the leader as
// it does zerodrop's.
func Main(args []string, stderr io.Writer) int {
	// The zerodrop binary's main turns SIGTERM into a context's end; the
	// cloud-controller-manager installs no handler, so SIGTERM ends it at
	// once, lease held.
	signal.Reset(syscall.SIGTERM, os.Interrupt)
	fs := flag.NewFlagSet("zerodrop lab upstream-controller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the API server")
	dir := fs.String("haproxy-dir", "", "state directory of the lab's running HAProxy (attached, never started)")
	binary := fs.String("haproxy-binary", "haproxy", "haproxy executable (configuration checks)")
	pool := fs.String("address-pool", "", "frontend addresses, a CIDR")
	leaseNS := fs.String("leader-election-namespace", "kube-system", "namespace of the leader Lease")
	leaseName := fs.String("leader-election-id", "cloud-controller-manager", "name of the leader Lease")
	metricsAddr := fs.String("metrics-bind-address", ":8080", "where leader_election_master_status is served")
	leaseDuration := fs.Duration("lease-duration", DefaultLeaseDuration, "leader lease duration")
	renewDeadline := fs.Duration("renew-deadline", DefaultRenewDeadline, "leader renew deadline")
	retryPeriod := fs.Duration("retry-period", DefaultRetryPeriod, "leader retry period")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	prefix, err := netip.ParsePrefix(*pool)
	if err != nil || *kubeconfig == "" || *dir == "" {
		fmt.Fprintf(stderr, "upstream-controller: want --kubeconfig, --haproxy-dir and --address-pool (%v)\n", err)
		return 2
	}
	if err := mainErr(*kubeconfig, *dir, *binary, prefix, *leaseNS, *leaseName, *metricsAddr,
		*leaseDuration, *renewDeadline, *retryPeriod, stderr); err != nil {
		fmt.Fprintf(stderr, "upstream-controller: %v\n", err)
		return 1
	}
	return 0
}

func mainErr(kubeconfig, dir, binary string, pool netip.Prefix, leaseNS, leaseName, metricsAddr string,
	leaseDuration, renewDeadline, retryPeriod time.Duration, stderr io.Writer) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// The provider attaches to the HAProxy the lab started in dir.
	prov, err := haproxy.New(context.TODO(), haproxy.Options{Dir: dir, Binary: binary, Log: logr.Discard()})
	if err != nil {
		return err
	}
	cloud := NewCloud(prov, pool)

	var leading atomic.Bool
	ln, err := net.Listen("tcp", metricsAddr)
	if err != nil {
		return err
	}
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			v := 0
			if leading.Load() {
				v = 1
			}
			fmt.Fprintf(w, "# TYPE leader_election_master_status gauge\nleader_election_master_status{name=%q} %d\n", leaseName, v)
		}))
	}()

	host := os.Getenv("HOSTNAME")
	if host == "" {
		if host, err = os.Hostname(); err != nil {
			return err
		}
	}
	id := host + "_" + string(uuid.NewUUID())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, leaseNS, leaseName, cs.CoreV1(), cs.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "upstream-controller: %s contends for lease %s/%s (%s/%s/%s)\n", id, leaseNS, leaseName,
		leaseDuration, renewDeadline, retryPeriod)
	leaderelection.RunOrDie(context.TODO(), leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: leaseDuration,
		RenewDeadline: renewDeadline,
		RetryPeriod:   retryPeriod,
		Name:          leaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				leading.Store(true)
				fmt.Fprintf(stderr, "upstream-controller: %s leads; starting the service controller\n", id)
				if err := Run(ctx, cfg, cloud); err != nil {
					fmt.Fprintf(stderr, "upstream-controller: %v\n", err)
				}
			},
			OnStoppedLeading: func() {
				fmt.Fprintln(stderr, "upstream-controller: leaderelection lost")
				os.Exit(1)
			},
		},
	})
	return errors.New("leader election ended")
}
