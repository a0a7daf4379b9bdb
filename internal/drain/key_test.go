package drain

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// The first replica creates the drain key; the next reads the same one; a
// key too short is an error, not a weak key.
func TestEnsureKey(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	first, err := EnsureKey(ctx, c, "zerodrop-system", DefaultKeySecret)
	if err != nil || len(first) != MinKeyLen {
		t.Fatalf("created key %d bytes, %v; want %d bytes", len(first), err, MinKeyLen)
	}
	again, err := EnsureKey(ctx, c, "zerodrop-system", DefaultKeySecret)
	if err != nil || !bytes.Equal(first, again) {
		t.Fatalf("second replica read %x (%v), want the first's %x", again, err, first)
	}
	short := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "zerodrop-system", Name: "short"}, Data: map[string][]byte{KeySecretField: []byte("weak")}}
	c = fake.NewClientBuilder().WithObjects(short).Build()
	if _, err := EnsureKey(ctx, c, "zerodrop-system", "short"); err == nil || !strings.Contains(err.Error(), "want at least 32") {
		t.Fatalf("a 4-byte key: %v, want an error naming the length wanted", err)
	}
}
