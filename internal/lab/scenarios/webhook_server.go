package scenarios

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"zerodrop.dev/zerodrop/internal/certs"
	"zerodrop.dev/zerodrop/internal/drainrelay"
	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/webhook"
)

// webhookServer serves zerodrop's real admission handler (package webhook)
// over TLS on a loopback port, registered with the API server by a
// MutatingWebhookConfiguration for namespaces labelled
// zerodrop.dev/inject=enabled: pods of zerodrop-mode scenarios get the
// readiness gate and the drain preStop hook exactly as in a cluster.
type webhookServer struct {
	srv *http.Server
}

const labWebhookConfiguration = "zerodrop-lab"

func startWebhook(ctx context.Context, cp *cluster.ControlPlane) (*webhookServer, error) {
	ca, err := certs.NewCA("zerodrop-lab-ca", time.Now(), 24*time.Hour)
	if err != nil {
		return nil, err
	}
	serving, err := certs.NewServing(ca, []string{"127.0.0.1"}, time.Now(), 24*time.Hour)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(serving.CertPEM, serving.KeyPEM)
	if err != nil {
		return nil, err
	}
	reader, err := client.New(cp.Config, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, err
	}
	handler := &admission.Webhook{Handler: &webhook.Handler{
		Reader:  reader,
		Decoder: admission.NewDecoder(scheme.Scheme),
		// Gate-only Services (the gates mode on emulated Azure) too; the
		// other modes' Services carry a zerodrop class or live in a
		// namespace the webhook does not see.
		Filter:    webhook.Filter{GateOnly: true},
		DrainHost: cluster.DrainClusterIP,
		DrainPort: drainPort,
		// As the chart installs it (drain.relay.enabled), with the lab's
		// image name for zerodrop.
		DrainRelay: &webhook.Relay{Image: cluster.ControllerImage, Port: drainrelay.DefaultPort},
		Logger:     logr.Discard(),
	}}
	mux := http.NewServeMux()
	mux.Handle(webhook.DefaultPath, handler)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w := &webhookServer{srv: &http.Server{
		Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
	}}
	go func() { _ = w.srv.ServeTLS(ln, "", "") }()

	url := "https://" + ln.Addr().String() + webhook.DefaultPath
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: labWebhookConfiguration},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "pods.zerodrop.dev",
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca.CertPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
					Resources: []string{"pods"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{webhook.LabelInject: webhook.InjectEnabled}},
			// Fail, unlike deploy/webhook.yaml: a lab whose zerodrop pods
			// came without their gates would measure the wrong thing.
			FailurePolicy:  ptr.To(admissionregistrationv1.Fail),
			SideEffects:    ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds: ptr.To[int32](5),
		}},
	}
	_, err = cp.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		w.close()
		return nil, fmt.Errorf("webhook configuration: %w", err)
	}
	return w, nil
}

func (w *webhookServer) close() {
	if w != nil {
		_ = w.srv.Close()
	}
}
