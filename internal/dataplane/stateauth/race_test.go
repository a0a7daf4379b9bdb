package stateauth_test

import (
	"context"
	"testing"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"zerodrop.dev/zerodrop/internal/dataplane/stateauth"
)

// TestSyncAdoptsTheCAAnotherReplicaWrote: two control replicas start with no
// CA Secret and both create one; the one whose create comes second (another
// wrote it between its read and its write) takes the other's CA in the same
// Sync — it neither fails the sync (no replica could be read until the next)
// nor writes a CA of its own over it. (A CI run failed
// TestReplicaRenewsWhenCAChanges on this race: the authority's own loop
// re-created the Secret between the test's Sync's read and write.)
func TestSyncAdoptsTheCAAnotherReplicaWrote(t *testing.T) {
	ctx := context.Background()
	base := fake.NewClientBuilder().Build()
	other := &stateauth.Authority{Client: base, Namespace: ns, Log: testr.New(t)}
	raced := 0
	c := interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.Secret); ok && raced == 0 {
				raced++
				// The other replica's sync lands between this one's
				// read (Secret missing) and its create.
				if err := other.Sync(ctx); err != nil {
					t.Fatalf("the other replica's sync: %v", err)
				}
			}
			return cl.Create(ctx, obj, opts...)
		},
	})
	a := &stateauth.Authority{Client: c, Namespace: ns, Log: testr.New(t)}
	if err := a.Sync(ctx); err != nil {
		t.Fatalf("Sync after losing the race to create the CA Secret: %v", err)
	}
	if raced != 1 {
		t.Fatalf("the race was not staged (%d creates intercepted)", raced)
	}
	var s corev1.Secret
	if err := base.Get(ctx, client.ObjectKey{Namespace: ns, Name: stateauth.DefaultCASecret}, &s); err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := base.Get(ctx, client.ObjectKey{Namespace: ns, Name: stateauth.DefaultCASecret}, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["ca.crt"] != string(s.Data["ca.crt"]) {
		t.Errorf("published CAs differ from the Secret's (the loser kept a CA of its own):\nConfigMap %q\nSecret %q", cm.Data["ca.crt"], s.Data["ca.crt"])
	}
	// Both replicas now trust the same CA: the loser syncing again writes
	// nothing (its CA is the Secret's).
	before := s.ResourceVersion
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := base.Get(ctx, client.ObjectKeyFromObject(&s), &s); err != nil {
		t.Fatal(err)
	}
	if s.ResourceVersion != before {
		t.Errorf("the CA Secret was written again by the replica that lost the race")
	}
}
