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

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
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
// around that controller, and nothing more — leader election with the
// default settings above; SIGTERM ends it with the lease held, as SIGKILL
// does; losing the lease exits 1 — docs/lab.md's table of
// cloud-controller-manager behaviours has each with its source.
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
	var o mainOptions
	pool := fs.String("address-pool", "", "frontend addresses, a CIDR")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the API server")
	fs.StringVar(&o.dir, "haproxy-dir", "", "state directory of the lab's HAProxy (the lab starts it before this controller)")
	fs.StringVar(&o.binary, "haproxy-binary", "haproxy", "haproxy executable (configuration checks)")
	fs.StringVar(&o.leaseNS, "leader-election-namespace", "kube-system", "namespace of the leader Lease")
	fs.StringVar(&o.leaseName, "leader-election-id", "cloud-controller-manager", "name of the leader Lease")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "where leader_election_master_status is served")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if o.pool, err = netip.ParsePrefix(*pool); err != nil || o.kubeconfig == "" || o.dir == "" {
		fmt.Fprintf(stderr, "upstream-controller: want --kubeconfig, --haproxy-dir and --address-pool (%v)\n", err)
		return 2
	}
	// It runs until the process is killed or loses its lease; returning is
	// a failure.
	fmt.Fprintf(stderr, "upstream-controller: %v\n", runManager(o, stderr))
	return 1
}

// mainOptions are the upstream-controller command's flags.
type mainOptions struct {
	kubeconfig, dir, binary, leaseNS, leaseName, metricsAddr string
	pool                                                     netip.Prefix
}

// runManager starts the cloud-controller-manager and returns only on a
// failure.
func runManager(o mainOptions, stderr io.Writer) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// The cloud writes the HAProxy the lab started in dir.
	cloud := NewCloud(NewHAProxy(o.dir, o.binary), o.pool)

	var leading atomic.Bool
	ln, err := net.Listen("tcp", o.metricsAddr)
	if err != nil {
		return err
	}
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			v := 0
			if leading.Load() {
				v = 1
			}
			fmt.Fprintf(w, "# TYPE leader_election_master_status gauge\nleader_election_master_status{name=%q} %d\n", o.leaseName, v)
		}))
	}()

	host := os.Getenv("HOSTNAME")
	if host == "" {
		if host, err = os.Hostname(); err != nil {
			return err
		}
	}
	id := host + "_" + string(uuid.NewUUID())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, o.leaseNS, o.leaseName, cs.CoreV1(), cs.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "upstream-controller: %s contends for lease %s/%s (%s/%s/%s)\n", id, o.leaseNS, o.leaseName,
		DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod)
	leaderelection.RunOrDie(context.TODO(), leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: DefaultLeaseDuration,
		RenewDeadline: DefaultRenewDeadline,
		RetryPeriod:   DefaultRetryPeriod,
		Name:          o.leaseName,
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
