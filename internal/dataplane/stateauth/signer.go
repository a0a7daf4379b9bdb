package stateauth

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// podUIDExtra is the user extra the API server sets for a request made
// with a ServiceAccount token bound to a pod (a kubelet's projected token).
const podUIDExtra = "authentication.kubernetes.io/pod-uid"

// ReasonCertificateDenied is the Event reason on a replica's pod when its
// certificate request was denied.
const ReasonCertificateDenied = "StateCertificateDenied"

// Signer approves and signs the replicas' certificate requests (signer
// SignerName) in the control role's leader. It issues a certificate only
// for a request that names one data-plane pod by UID and was made with a
// token bound to that very pod, and denies every other — so a certificate
// for a replica proves the request came from inside that replica's pod.
type Signer struct {
	// Client writes the requests' approval and status; Reader looks pods up
	// directly (a pod just created may not be in a cache yet).
	Client    client.Client
	Reader    client.Reader
	Authority *Authority
	// Namespace and Selector find the data-plane pods.
	Namespace string
	Selector  labels.Selector
	Recorder  events.EventRecorder
	Log       logr.Logger
}

// SetupWithManager runs the signer in mgr's leader.
func (s *Signer) SetupWithManager(mgr ctrl.Manager) error {
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool {
		csr, ok := o.(*certificatesv1.CertificateSigningRequest)
		return ok && csr.Spec.SignerName == SignerName
	})
	return builder.ControllerManagedBy(mgr).Named("data-plane-state-signer").
		// Tests run several controllers in one process.
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		For(&certificatesv1.CertificateSigningRequest{}, builder.WithPredicates(ours)).
		Complete(s)
}

// Reconcile decides and signs one request.
func (s *Signer) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var csr certificatesv1.CertificateSigningRequest
	if err := s.Client.Get(ctx, req.NamespacedName, &csr); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if csr.Spec.SignerName != SignerName || len(csr.Status.Certificate) > 0 ||
		hasCondition(&csr, certificatesv1.CertificateDenied) || hasCondition(&csr, certificatesv1.CertificateFailed) {
		return reconcile.Result{}, nil
	}
	x509req, pod, why, err := s.check(ctx, &csr)
	if err != nil {
		return reconcile.Result{}, err // the API could not be asked: try again
	}
	log := s.Log.WithValues("csr", csr.Name, "requester", csr.Spec.Username)
	if why != "" {
		log.Info("data-plane certificate request denied", "reason", why)
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue, Reason: "NotADataPlaneReplica",
			Message: why, LastUpdateTime: metav1.Now()})
		if err := s.Client.SubResource("approval").Update(ctx, &csr); err != nil {
			return reconcile.Result{}, fmt.Errorf("deny %s: %w", csr.Name, err)
		}
		if pod != nil && s.Recorder != nil {
			s.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonCertificateDenied, "SignStateCertificate",
				"certificate request %s denied: %s; the gates do not read this replica until it has a certificate", csr.Name, why)
		}
		return reconcile.Result{}, nil
	}
	if !hasCondition(&csr, certificatesv1.CertificateApproved) {
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "DataPlaneReplica",
			Message: fmt.Sprintf("made with a token bound to data-plane pod %s/%s", pod.Namespace, pod.Name), LastUpdateTime: metav1.Now()})
		if err := s.Client.SubResource("approval").Update(ctx, &csr); err != nil {
			return reconcile.Result{}, fmt.Errorf("approve %s: %w", csr.Name, err)
		}
	}
	// Sign with the CAs as they are in the Secret now, not as of the last
	// periodic sync: a replica renewing because the CAs changed gets the
	// new ones at once.
	if err := s.Authority.Sync(ctx); err != nil {
		log.Error(err, "data-plane CA not synced before signing; signing with the CAs last read")
	}
	now := s.Authority.now()
	ca, bundle, err := s.Authority.signing(now)
	if err != nil {
		return reconcile.Result{RequeueAfter: 2 * time.Second}, nil
	}
	validity := orDefault(s.Authority.LeafValidity, DefaultLeafValidity)
	if e := csr.Spec.ExpirationSeconds; e != nil && time.Duration(*e)*time.Second < validity {
		validity = time.Duration(*e) * time.Second
	}
	leaf, err := issue(ca, x509req.PublicKey, pod.Namespace+"/"+pod.Name, ReplicaURI(pod.UID), x509.ExtKeyUsageServerAuth, now, validity)
	if err != nil {
		return reconcile.Result{}, err
	}
	// The leaf, then the CAs the control role's client certificates come
	// from: the replica trusts those for clients.
	out := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw})
	for _, c := range bundle {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	csr.Status.Certificate = out
	if err := s.Client.Status().Update(ctx, &csr); err != nil {
		return reconcile.Result{}, fmt.Errorf("sign %s: %w", csr.Name, err)
	}
	log.Info("data-plane certificate issued", "pod", pod.Namespace+"/"+pod.Name, "notAfter", leaf.NotAfter)
	return reconcile.Result{}, nil
}

// check returns why csr must be denied ("" when it may be signed), with its
// parsed request and the pod it names (when found).
func (s *Signer) check(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) (*x509.CertificateRequest, *corev1.Pod, string, error) {
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, nil, "the request is not a PEM CERTIFICATE REQUEST", nil
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, nil, "the request does not parse: " + err.Error(), nil
	}
	if err := req.CheckSignature(); err != nil {
		return nil, nil, "the request's signature does not verify: " + err.Error(), nil
	}
	if len(req.DNSNames)+len(req.IPAddresses)+len(req.EmailAddresses) > 0 || len(req.URIs) != 1 {
		return nil, nil, "the request must name exactly one replica URI and nothing else", nil
	}
	uid, ok := replicaUID(req.URIs[0].String())
	if !ok {
		return nil, nil, fmt.Sprintf("the request names %s, not a data-plane replica", req.URIs[0]), nil
	}
	for _, u := range csr.Spec.Usages {
		if u != certificatesv1.UsageServerAuth && u != certificatesv1.UsageDigitalSignature && u != certificatesv1.UsageKeyEncipherment {
			return nil, nil, fmt.Sprintf("usage %q is not a serving certificate's", u), nil
		}
	}
	var pods corev1.PodList
	if err := s.Reader.List(ctx, &pods, client.InNamespace(s.Namespace), client.MatchingLabelsSelector{Selector: s.Selector}); err != nil {
		return nil, nil, "", fmt.Errorf("list data-plane pods: %w", err)
	}
	var pod *corev1.Pod
	for i := range pods.Items {
		if pods.Items[i].UID == uid {
			pod = &pods.Items[i]
		}
	}
	if pod == nil {
		return nil, nil, fmt.Sprintf("no data-plane pod in %s has UID %s", s.Namespace, uid), nil
	}
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil, pod, "the pod is terminating or finished", nil
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	if want := "system:serviceaccount:" + pod.Namespace + ":" + sa; csr.Spec.Username != want {
		return nil, pod, fmt.Sprintf("requested by %s, not by the pod's ServiceAccount %s", csr.Spec.Username, want), nil
	}
	if got := csr.Spec.Extra[podUIDExtra]; !slices.Equal([]string(got), []string{string(uid)}) {
		return nil, pod, fmt.Sprintf("not requested with a token bound to pod UID %s (the request's %s: %v)", uid, podUIDExtra, []string(got)), nil
	}
	return req, pod, "", nil
}

func hasCondition(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

var errNoCertificate = errors.New("no certificate issued yet")
