package certs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Defaults of Options.
const (
	DefaultSecretName           = "zerodrop-webhook-tls"
	DefaultServiceName          = "zerodrop-webhook"
	DefaultWebhookConfiguration = "zerodrop"
	DefaultClusterDomain        = "cluster.local"
	DefaultCAValidity           = 365 * 24 * time.Hour
	DefaultServingValidity      = 90 * 24 * time.Hour
	DefaultOverlap              = 5 * time.Minute
	DefaultSyncPeriod           = time.Minute
)

// Options configure the Manager. Zero values get the defaults above.
type Options struct {
	// Client must read from the API server, not from an informer cache:
	// the first Sync runs before the manager's caches start, and a cache of
	// Secrets would need cluster-wide list and watch.
	Client client.Client
	// Namespace holds the Secret and the webhook Service.
	Namespace   string
	SecretName  string
	ServiceName string
	// ClusterDomain completes <svc>.<ns>.svc.<domain> (default cluster.local).
	ClusterDomain string
	// ExtraHosts are added to the serving certificate (tests reach the
	// webhook at 127.0.0.1).
	ExtraHosts []string
	// WebhookConfiguration is the MutatingWebhookConfiguration whose
	// caBundle is kept current; when it does not exist nothing is patched.
	WebhookConfiguration string
	// CertDir receives CertName and KeyName (default tls.crt, tls.key); the
	// webhook server's certificate watcher reloads them.
	CertDir  string
	CertName string
	KeyName  string
	// CAValidity and ServingValidity are the lifetimes of new certificates
	// (the serving one at most the CA's); each is renewed when less than a
	// third of it remains.
	CAValidity      time.Duration
	ServingValidity time.Duration
	// Overlap, see Policy.Overlap. It must exceed SyncPeriod plus the
	// certificate watcher's 10s poll so every replica serves the new
	// certificate before the old CA is dropped.
	Overlap time.Duration
	// SyncPeriod is how often every replica looks at the Secret again.
	SyncPeriod time.Duration
	Now        func() time.Time
	Logger     logr.Logger
}

// Manager keeps the webhook's certificates. Every replica runs one: each
// writes its own certificate files, and they agree through the Secret
// (optimistic concurrency on its resourceVersion), so no leader is needed.
type Manager struct {
	opts   Options
	policy Policy
}

// New validates opts and fills in the defaults.
func New(opts Options) (*Manager, error) {
	if opts.Client == nil {
		return nil, errors.New("certs: no client")
	}
	if opts.Namespace == "" {
		return nil, errors.New("certs: no namespace")
	}
	if opts.CertDir == "" {
		return nil, errors.New("certs: no certificate directory")
	}
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&opts.SecretName, DefaultSecretName)
	def(&opts.ServiceName, DefaultServiceName)
	def(&opts.ClusterDomain, DefaultClusterDomain)
	def(&opts.WebhookConfiguration, DefaultWebhookConfiguration)
	def(&opts.CertName, corev1.TLSCertKey)
	def(&opts.KeyName, corev1.TLSPrivateKeyKey)
	defDur := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defDur(&opts.CAValidity, DefaultCAValidity)
	defDur(&opts.ServingValidity, DefaultServingValidity)
	// A serving certificate never outlives its CA anyway.
	opts.ServingValidity = min(opts.ServingValidity, opts.CAValidity)
	defDur(&opts.SyncPeriod, DefaultSyncPeriod)
	if opts.Overlap == 0 {
		opts.Overlap = DefaultOverlap
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	m := &Manager{opts: opts, policy: Policy{
		Hosts:           append(ServiceHosts(opts.ServiceName, opts.Namespace, opts.ClusterDomain), opts.ExtraHosts...),
		CAValidity:      opts.CAValidity,
		ServingValidity: opts.ServingValidity,
		Overlap:         opts.Overlap,
	}}
	if err := m.policy.Validate(); err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	return m, nil
}

// ServiceHosts are the DNS names the API server uses for a webhook Service.
func ServiceHosts(service, namespace, clusterDomain string) []string {
	base := service + "." + namespace + ".svc"
	return []string{base, base + "." + clusterDomain}
}

// NeedLeaderElection is false: every replica serves the webhook and needs
// the certificate files.
func (m *Manager) NeedLeaderElection() bool { return false }

// Start syncs every SyncPeriod (jittered, so replicas do not race each
// other on the Secret), sooner after a failure, until ctx is done.
func (m *Manager) Start(ctx context.Context) error {
	backoff := time.Second
	for {
		wait := m.opts.SyncPeriod + rand.N(m.opts.SyncPeriod/5+1)
		if err := m.Sync(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			m.opts.Logger.Error(err, "certificate sync failed", "retryIn", backoff)
			wait, backoff = backoff, min(2*backoff, m.opts.SyncPeriod)
		} else {
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Sync brings the Secret, the webhook configuration's caBundle and the
// certificate files up to date. A lost race with another replica (the
// Secret changed or was created meanwhile) is retried at once on the
// state that replica wrote.
func (m *Manager) Sync(ctx context.Context) error {
	isRace := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }
	return retry.OnError(retry.DefaultRetry, isRace, func() error { return m.sync(ctx) })
}

func (m *Manager) sync(ctx context.Context) error {
	log := m.opts.Logger
	c := m.opts.Client
	key := types.NamespacedName{Namespace: m.opts.Namespace, Name: m.opts.SecretName}
	secret := &corev1.Secret{}
	exists := true
	if err := c.Get(ctx, key, secret); apierrors.IsNotFound(err) {
		exists = false
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	} else if err != nil {
		return fmt.Errorf("get secret %s: %w", key, err)
	}
	st, err := decode(secret)
	if err != nil && !errors.Is(err, errNoState) {
		log.Info("stored certificates are partly unusable; replacing them", "secret", key.String(), "reason", err.Error())
	}
	mwc, err := m.webhookConfiguration(ctx)
	if err != nil {
		return err
	}
	published := mwc == nil || bundleCurrent(mwc, st.Bundle())

	// Take every step that is due now; the steps that wait for an overlap
	// stop the loop until a later sync.
	for range 4 {
		next, change, err := Step(st, m.policy, m.opts.Now(), published)
		if err != nil {
			return fmt.Errorf("rotate certificates: %w", err)
		}
		if change == Unchanged {
			break
		}
		encode(next, secret)
		if exists {
			err = c.Update(ctx, secret)
		} else {
			err = c.Create(ctx, secret)
		}
		if err != nil {
			return fmt.Errorf("store certificates in secret %s: %w", key, err)
		}
		exists = true
		st = next
		log.Info("certificates rotated", "step", string(change), "secret", key.String(),
			"caNotAfter", st.CA.Cert.NotAfter, "servingNotAfter", st.Serving.Cert.NotAfter, "trustedCAs", len(st.Trusted))
		if mwc != nil {
			if err := m.publish(ctx, mwc, st.Bundle()); err != nil {
				return err
			}
		}
		published = true
	}
	if !published {
		// Somebody else changed the caBundle (a re-applied manifest, a
		// replica on an older Secret): put ours back.
		if err := m.publish(ctx, mwc, st.Bundle()); err != nil {
			return err
		}
	}
	return m.writeFiles(st.Serving)
}

func (m *Manager) webhookConfiguration(ctx context.Context) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	err := m.opts.Client.Get(ctx, types.NamespacedName{Name: m.opts.WebhookConfiguration}, mwc)
	if apierrors.IsNotFound(err) {
		m.opts.Logger.V(1).Info("no webhook configuration to publish the CA bundle to", "name", m.opts.WebhookConfiguration)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get MutatingWebhookConfiguration %s: %w", m.opts.WebhookConfiguration, err)
	}
	return mwc, nil
}

func bundleCurrent(mwc *admissionregistrationv1.MutatingWebhookConfiguration, bundle []byte) bool {
	for _, w := range mwc.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, bundle) {
			return false
		}
	}
	return true
}

type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// publish patches the caBundle of every webhook whose bundle differs, and
// nothing else: a JSON patch with a test of each webhook's name, so a
// concurrent edit of the list fails the patch instead of being overwritten.
func (m *Manager) publish(ctx context.Context, mwc *admissionregistrationv1.MutatingWebhookConfiguration, bundle []byte) error {
	var ops []jsonPatchOp
	for i, w := range mwc.Webhooks {
		if bytes.Equal(w.ClientConfig.CABundle, bundle) {
			continue
		}
		ops = append(ops,
			jsonPatchOp{Op: "test", Path: fmt.Sprintf("/webhooks/%d/name", i), Value: w.Name},
			jsonPatchOp{Op: "add", Path: fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), Value: bundle})
	}
	if len(ops) == 0 {
		return nil
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return fmt.Errorf("encode caBundle patch: %w", err)
	}
	if err := m.opts.Client.Patch(ctx, mwc, client.RawPatch(types.JSONPatchType, data)); err != nil {
		return fmt.Errorf("patch caBundle of MutatingWebhookConfiguration %s: %w", mwc.Name, err)
	}
	m.opts.Logger.Info("caBundle published", "webhookConfiguration", mwc.Name, "webhooks", len(ops)/2)
	return nil
}
