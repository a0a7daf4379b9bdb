package drain

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultKeySecret names the Secret (in the controller's namespace) that
// holds the drain key, under KeySecretField.
const (
	DefaultKeySecret = "zerodrop-drain-key"
	KeySecretField   = "key"
)

// EnsureKey reads the drain key from the Secret namespace/name, creating
// it with a random key when it does not exist. Every replica calls it at
// start; the first to create the Secret wins, the others read its key. The
// key is never rotated by zerodrop: the tokens of running pods derive from
// it, and a relay whose token no longer matches can only wait out its
// deadline. c must read from the API server (no cache of Secrets).
func EnsureKey(ctx context.Context, c client.Client, namespace, name string) ([]byte, error) {
	for attempt := 0; attempt < 3; attempt++ {
		var s corev1.Secret
		err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &s)
		switch {
		case err == nil:
			key := s.Data[KeySecretField]
			if len(key) < MinKeyLen {
				return nil, fmt.Errorf("drain key Secret %s/%s: %q holds %d bytes, want at least %d", namespace, name, KeySecretField, len(key), MinKeyLen)
			}
			return key, nil
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("drain key Secret %s/%s: %w", namespace, name, err)
		}
		key := make([]byte, MinKeyLen)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("drain key: %w", err)
		}
		s = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "zerodrop"}},
			Type: corev1.SecretTypeOpaque, Data: map[string][]byte{KeySecretField: key}}
		switch err := c.Create(ctx, &s); {
		case err == nil:
			return key, nil
		case !apierrors.IsAlreadyExists(err):
			return nil, fmt.Errorf("creating the drain key Secret %s/%s: %w", namespace, name, err)
		}
		// Another replica created it first: read its key.
	}
	return nil, fmt.Errorf("drain key Secret %s/%s: created and gone again, three times", namespace, name)
}
