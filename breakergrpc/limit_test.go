package breakergrpc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breakergrpc"
	"github.com/tripswitch-dev/tripswitch/limit"
)

// dialLimited dials addr with circuit b (nil: none) and limit l on every
// method.
func dialLimited(t testing.TB, addr string, b *breaker.Breaker, l limit.Limiter) healthpb.HealthClient {
	t.Helper()
	circuits := func(string) *breaker.Breaker { return b }
	cfg := breakergrpc.Config{Limits: func(string) limit.Limiter { return l }}
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(breakergrpc.UnaryClientInterceptor(circuits, cfg)),
		grpc.WithStreamInterceptor(breakergrpc.StreamClientInterceptor(circuits, cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return healthpb.NewHealthClient(cc)
}

func oneCall(t testing.TB) *limit.Bulkhead {
	t.Helper()
	l, err := limit.NewBulkhead("account", limit.BulkheadConfig{MaxConcurrentCalls: 1})
	if err != nil {
		t.Fatal(err)
	}
	l.EnableRejectionCount() // the tests count rejections: nothing retried
	return l
}

// TestALimitsRejectionSendsNothingAndIsIgnored: with one call in flight at
// a limit of one, the next unary call and the next stream are rejected
// before anything is sent, with ResourceExhausted matching
// limit.ErrLimited; a circuit that opens on one failure stays CLOSED.
func TestALimitsRejectionSendsNothingAndIsIgnored(t *testing.T) {
	addr, h := serve(t)
	b, l := newBreaker(t, 1), oneCall(t)
	hc := dialLimited(t, addr, b, l)
	ctx, cancel := context.WithCancel(context.Background())
	held := make(chan error, 1)
	go func() {
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "slow"})
		held <- err
	}()
	for h.rpcs.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	_, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ok"})
	if status.Code(err) != codes.ResourceExhausted || !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("unary call beyond the limit: %v, want ResourceExhausted matching ErrLimited", err)
	}
	if _, err := hc.Watch(context.Background(), &healthpb.HealthCheckRequest{Service: "ok"}); !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("stream beyond the limit: %v, want limited", err)
	}
	if n := h.rpcs.Load(); n != 1 {
		t.Fatalf("the server saw %d calls, want 1", n)
	}
	if m := b.Metrics(); m.Calls != 0 || b.State() != breaker.Closed {
		t.Fatalf("circuit %s with %d calls in its window, want the rejections ignored", b.State(), m.Calls)
	}
	cancel()
	<-held
	if m := l.Metrics(); m.InFlight != 0 || m.Rejected != 2 {
		t.Fatalf("limit %+v, want 2 rejections and the permit back", m)
	}
}

// TestTheLimitsPermitComesBackOnEveryEnding: unary success and failure,
// a canceled caller, a stream read to its end, a stream that fails, and a
// stream abandoned by canceling its context; and a limit on a method with
// no circuit.
func TestTheLimitsPermitComesBackOnEveryEndingOfACall(t *testing.T) {
	addr, _ := serve(t)
	for name, call := range map[string]func(hc healthpb.HealthClient){
		"unary success": func(hc healthpb.HealthClient) {
			_, _ = hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ok"})
		},
		"unary failure": func(hc healthpb.HealthClient) {
			_, _ = hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "code/14"})
		},
		"unary canceled": func(hc healthpb.HealthClient) {
			ctx, cancel := context.WithCancelCause(context.Background())
			time.AfterFunc(10*time.Millisecond, func() { cancel(errors.New("client went away")) })
			_, _ = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "slow"})
		},
		"stream to its end": func(hc healthpb.HealthClient) {
			ws, err := hc.Watch(context.Background(), &healthpb.HealthCheckRequest{Service: "ok"})
			for err == nil {
				_, err = ws.Recv()
			}
		},
		"stream failing": func(hc healthpb.HealthClient) {
			ws, err := hc.Watch(context.Background(), &healthpb.HealthCheckRequest{Service: "code/13"})
			for err == nil {
				_, err = ws.Recv()
			}
		},
		"stream abandoned": func(hc healthpb.HealthClient) {
			ctx, cancel := context.WithCancel(context.Background())
			if ws, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "hang"}); err == nil {
				_, _ = ws.Recv()
			}
			cancel()
		},
	} {
		for _, circuit := range []bool{true, false} {
			l := oneCall(t)
			var b *breaker.Breaker
			if circuit {
				b = newBreaker(t, 100)
			}
			call(dialLimited(t, addr, b, l))
			for deadline := time.Now().Add(10 * time.Second); l.Metrics().InFlight != 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s (circuit %v): limit %+v, the permit was not given back", name, circuit, l.Metrics())
				}
			}
		}
	}
}

// TestALimitInAnInterceptorOfYourOwnIsIgnoredToo: a limit composed by hand
// in an interceptor chained inside the circuit's rejects with a plain
// *limit.LimitedError (not a gRPC status); it matches breaker.ErrNotCalled,
// which DefaultClassifier ignores, so a circuit that opens on one failure
// stays CLOSED and nothing is sent.
func TestALimitInAnInterceptorOfYourOwnIsIgnoredToo(t *testing.T) {
	addr, h := serve(t)
	b := newBreaker(t, 1)
	full := oneCall(t)
	held, _ := full.Acquire(context.Background())
	defer held.Release()
	limited := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		_, err := limit.Execute(ctx, full, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, invoker(ctx, method, req, reply, cc, opts...)
		})
		return err
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(breakergrpc.UnaryClientInterceptor(breakergrpc.One(b), breakergrpc.Config{}), limited))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	if _, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ok"}); !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("%v, want the limit's rejection", err)
	}
	if got := outcome(t, b); got != breaker.Ignore || b.State() != breaker.Closed || h.rpcs.Load() != 0 {
		t.Fatalf("counted as %s, circuit %s, %d calls served: want ignored, CLOSED, none sent", got, b.State(), h.rpcs.Load())
	}
}
