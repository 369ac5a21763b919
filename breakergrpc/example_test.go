package breakergrpc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breakergrpc"
	"github.com/tripswitch-dev/tripswitch/limit"
)

// One circuit per call site on one connection: the permission check and the
// other lookups fail for different reasons and must not open each other.
// The per-call timeout is on the context, inside the circuit.
func ExampleUnaryClientInterceptor() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, &health{})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	circuits, _ := breaker.NewRegistry(breaker.Config{MinimumNumberOfCalls: 2}, nil)
	byMethod := func(method string) *breaker.Breaker {
		if method == healthpb.Health_Check_FullMethodName {
			return circuits.Get("account-access")
		}
		return circuits.Get("account-read")
	}
	cc, _ := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(breakergrpc.UnaryClientInterceptor(byMethod, breakergrpc.Config{})),
		grpc.WithStreamInterceptor(breakergrpc.StreamClientInterceptor(byMethod, breakergrpc.Config{})))
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)

	check := func(service string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		return err
	}
	unavailable := fmt.Sprintf("code/%d", codes.Unavailable)
	_ = check(unavailable)
	_ = check(unavailable) // 2 of 2 failed: account-access opens
	err := check("ok")
	fmt.Println(status.Code(err), errors.Is(err, breaker.ErrOpen))
	fmt.Println("account-access:", circuits.Get("account-access").State())
	fmt.Println("account-read:", circuits.Get("account-read").State())
	// Output:
	// Unavailable true
	// account-access: OPEN
	// account-read: CLOSED
}

// With ServerPushback, a server that sheds load and says when to come back
// (google.rpc.RetryInfo, or the grpc-retry-pushback-ms trailer) opens the
// circuit for that long, capped by the breaker's OpenUntilCap.
func ExampleConfig_serverPushback() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, &shedding{retryInfo: 30 * time.Second})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	b, _ := breaker.New("account-read", breaker.Config{OpenUntilCap: 5 * time.Minute})
	cfg := breakergrpc.Config{ServerPushback: true}
	cc, _ := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(breakergrpc.UnaryClientInterceptor(breakergrpc.One(b), cfg)))
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)

	_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println(status.Code(err), b.State())
	_, err = client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	var oe *breaker.OpenError
	if errors.As(err, &oe) {
		d := oe.RetryAfter(time.Now())
		fmt.Println(status.Code(err), d > 0 && d <= 30*time.Second)
	}
	// Output:
	// Unavailable OPEN
	// Unavailable true
}

// A stream is one call to the circuit, recorded when it ends: here each
// watch gets a message and then fails with Unavailable, so the second one's
// end opens the circuit and the third is refused before anything is sent.
func ExampleStreamClientInterceptor() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, &health{})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	b, _ := breaker.New("account-watch", breaker.Config{MinimumNumberOfCalls: 2})
	cc, _ := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStreamInterceptor(breakergrpc.StreamClientInterceptor(breakergrpc.One(b), breakergrpc.Config{})))
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)

	watch := func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{Service: fmt.Sprintf("code/%d", codes.Unavailable)})
		if err != nil {
			fmt.Println("refused:", status.Code(err), errors.Is(err, breaker.ErrOpen))
			return
		}
		for {
			msg, err := stream.Recv()
			if err != nil {
				fmt.Println("ended:", status.Code(err))
				return
			}
			fmt.Println("got:", msg.GetStatus())
		}
	}
	for range 3 {
		watch()
	}
	fmt.Println(b.State())
	// Output:
	// got: SERVING
	// ended: Unavailable
	// got: SERVING
	// ended: Unavailable
	// refused: Unavailable true
	// OPEN
}

// A concurrency limit per call site, inside its circuit: with the one call
// a bulkhead allows in flight, the next is rejected before anything is
// sent, as a LimitedError whose status is ResourceExhausted; the circuit
// does not count it.
func ExampleLimitedError() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, grpchealth.NewServer())
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	access, _ := breaker.New("account-access", breaker.Config{})
	bulkhead, _ := limit.NewBulkhead("account-access", limit.BulkheadConfig{MaxConcurrentCalls: 1})
	cfg := breakergrpc.Config{Limits: func(string) limit.Limiter { return bulkhead }}
	cc, _ := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(breakergrpc.UnaryClientInterceptor(breakergrpc.One(access), cfg)))
	defer cc.Close()

	held, _ := bulkhead.Acquire(context.Background()) // another call is in flight
	_, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
	held.Release()
	var le breakergrpc.LimitedError
	fmt.Println(status.Code(err), errors.Is(err, limit.ErrLimited), errors.As(err, &le), access.Metrics().Calls)
	// Output:
	// ResourceExhausted true true 0
}
