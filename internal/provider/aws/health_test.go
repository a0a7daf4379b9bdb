package aws

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbv2types "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
)

// fakeHealth answers DescribeTargetHealth once release is closed, counting
// the calls; the other operations are not called here.
type fakeHealth struct {
	API
	calls   atomic.Int32
	release chan struct{}
}

func (f *fakeHealth) DescribeTargetHealth(ctx context.Context, in *elbv2.DescribeTargetHealthInput,
	_ ...func(*elbv2.Options)) (*elbv2.DescribeTargetHealthOutput, error) {
	f.calls.Add(1)
	<-f.release
	return &elbv2.DescribeTargetHealthOutput{TargetHealthDescriptions: []elbv2types.TargetHealthDescription{{
		Target:       &elbv2types.TargetDescription{Id: aws.String("i-1"), Port: aws.Int32(30080)},
		TargetHealth: &elbv2types.TargetHealth{State: elbv2types.TargetHealthStateEnumHealthy}}}}, nil
}

// TestHealthReadShared: gates asking about one target group at once share
// one DescribeTargetHealth, and its answer serves them for HealthMaxAge.
func TestHealthReadShared(t *testing.T) {
	f := &fakeHealth{release: make(chan struct{})}
	p, err := New(Options{API: f, HealthMaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const gates = 10
	var wg sync.WaitGroup
	answers := make(chan int, gates)
	for range gates {
		wg.Go(func() {
			answer, _, _, err := p.targetHealth(context.Background(), "arn:tg")
			if err != nil {
				t.Error(err)
			}
			answers <- len(answer)
		})
	}
	// Every gate is waiting (one on the call, the others on it) before the
	// answer comes.
	deadline := time.Now().Add(10 * time.Second)
	for f.calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	close(f.release)
	wg.Wait()
	close(answers)
	for n := range answers {
		if n != 1 {
			t.Errorf("a gate got %d targets, want the answer's 1", n)
		}
	}
	if _, _, _, err := p.targetHealth(context.Background(), "arn:tg"); err != nil {
		t.Fatal(err)
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("%d DescribeTargetHealth calls for %d gates and one more within HealthMaxAge, want 1", n, gates+1)
	}
}

// TestHealthReadBudget: past the budget a read is not made; the gate is
// told so and looks again later.
func TestHealthReadBudget(t *testing.T) {
	f := &fakeHealth{release: make(chan struct{})}
	close(f.release)
	p, err := New(Options{API: f, HealthMaxAge: time.Nanosecond, QPS: 0.001, Burst: 1, ReadTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := p.targetHealth(context.Background(), "arn:a"); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = p.targetHealth(context.Background(), "arn:b")
	if err == nil || !strings.Contains(err.Error(), "request budget") {
		t.Errorf("a read past the budget: %v, want the budget's refusal", err)
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("%d calls with a budget of one, want 1", n)
	}
}
