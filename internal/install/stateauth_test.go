package install

import (
	"context"
	"crypto/tls"
	"testing"

	"github.com/go-logr/logr/testr"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"zerodrop.dev/zerodrop/internal/dataplane/stateauth"
	"zerodrop.dev/zerodrop/internal/testutil"
)

// stateAuthority runs the control role's side of the data-plane state
// endpoint's authentication (the CA and the signer of the replicas'
// certificates, for the pods in ns matching selector) until the test ends,
// and returns the TLS client configuration for the replica whose pod has a
// given UID.
func stateAuthority(t *testing.T, cfg *rest.Config, ns string, selector labels.Selector) func(uid string) *tls.Config {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	auth := &stateauth.Authority{Client: testutil.Client(t, cfg), Namespace: ns, Log: testr.New(t)}
	if err := mgr.Add(auth); err != nil {
		t.Fatal(err)
	}
	signer := &stateauth.Signer{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Authority: auth,
		Namespace: ns, Selector: selector, Log: testr.New(t)}
	if err := signer.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { testutil.StopManager(t, cancel, done) })
	return auth.TLSConfig
}
