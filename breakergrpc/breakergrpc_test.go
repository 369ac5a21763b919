package breakergrpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breakergrpc"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// health is a real gRPC service whose answers the request's service name
// scripts: "ok", "code/N" (fail with code N), "slow" (wait for the caller).
type health struct {
	healthpb.UnimplementedHealthServer
	rpcs atomic.Int64
}

func parse(name string) error {
	var c int
	if _, err := fmt.Sscanf(name, "code/%d", &c); err == nil {
		return status.Errorf(codes.Code(c), "scripted %s", codes.Code(c))
	}
	return nil
}

func (h *health) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.rpcs.Add(1)
	if req.Service == "slow" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err := parse(req.Service); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (h *health) Watch(req *healthpb.HealthCheckRequest, s healthpb.Health_WatchServer) error {
	h.rpcs.Add(1)
	if err := s.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
		return err
	}
	if req.Service == "hang" {
		<-s.Context().Done()
		return s.Context().Err()
	}
	if err := parse(req.Service); err != nil {
		return err
	}
	return s.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

func serve(t testing.TB) (string, *health) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	h := &health{}
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String(), h
}

func newBreaker(t testing.TB, min int) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New("account", breaker.Config{MinimumNumberOfCalls: min, WaitDurationInOpenState: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b.EnableTotals()
	return b
}

func dial(t testing.TB, addr string, b *breaker.Breaker, opts ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	opts = append(opts,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(breakergrpc.UnaryClientInterceptor(breakergrpc.One(b), breakergrpc.Config{})),
		grpc.WithStreamInterceptor(breakergrpc.StreamClientInterceptor(breakergrpc.One(b), breakergrpc.Config{})))
	cc, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return healthpb.NewHealthClient(cc)
}

func outcome(t *testing.T, b *breaker.Breaker) breaker.Outcome {
	t.Helper()
	tot := b.Totals()
	switch {
	case tot.Successful == 1 && tot.Failed == 0 && tot.Ignored == 0:
		return breaker.Success
	case tot.Successful == 0 && tot.Failed == 1 && tot.Ignored == 0:
		return breaker.Failure
	case tot.Successful == 0 && tot.Failed == 0 && tot.Ignored == 1:
		return breaker.Ignore
	}
	t.Fatalf("not exactly one outcome recorded: %+v", tot)
	return 0
}

// TestUnaryClassification: every code the package documents, returned by a
// real server through a real connection.
func TestUnaryClassification(t *testing.T) {
	addr, _ := serve(t)
	cases := []struct {
		code codes.Code
		want breaker.Outcome
	}{
		{codes.OK, breaker.Success},
		{codes.Unavailable, breaker.Failure}, {codes.DeadlineExceeded, breaker.Failure},
		{codes.Internal, breaker.Failure}, {codes.Unknown, breaker.Failure}, {codes.DataLoss, breaker.Failure},
		{codes.InvalidArgument, breaker.Ignore}, {codes.NotFound, breaker.Ignore},
		{codes.PermissionDenied, breaker.Ignore}, {codes.Unauthenticated, breaker.Ignore},
		{codes.AlreadyExists, breaker.Ignore}, {codes.FailedPrecondition, breaker.Ignore},
		{codes.ResourceExhausted, breaker.Ignore}, // a server quota
		{codes.Aborted, breaker.Ignore}, {codes.OutOfRange, breaker.Ignore}, {codes.Unimplemented, breaker.Ignore},
	}
	for _, tc := range cases {
		t.Run(tc.code.String(), func(t *testing.T) {
			b := newBreaker(t, 100)
			c := dial(t, addr, b)
			name := "ok"
			if tc.code != codes.OK {
				name = fmt.Sprintf("code/%d", tc.code)
			}
			_, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
			if status.Code(err) != tc.code {
				t.Fatalf("the call's error changed: %v", err)
			}
			if got := outcome(t, b); got != tc.want {
				t.Fatalf("%s counted as %s, want %s", tc.code, got, tc.want)
			}
		})
	}
}

// TestUnaryDeadlineCancelAndConnection: the caller's deadline and a refused
// connection are failures; the caller cancelling is ignored.
func TestUnaryDeadlineCancelAndConnection(t *testing.T) {
	addr, _ := serve(t)
	t.Run("deadline", func(t *testing.T) {
		b := newBreaker(t, 100)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := dial(t, addr, b).Check(ctx, &healthpb.HealthCheckRequest{Service: "slow"})
		if status.Code(err) != codes.DeadlineExceeded || outcome(t, b) != breaker.Failure {
			t.Fatalf("err %v, totals %+v", err, b.Totals())
		}
	})
	t.Run("cancel", func(t *testing.T) {
		b := newBreaker(t, 100)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(30*time.Millisecond, cancel)
		_, err := dial(t, addr, b).Check(ctx, &healthpb.HealthCheckRequest{Service: "slow"})
		if status.Code(err) != codes.Canceled || outcome(t, b) != breaker.Ignore {
			t.Fatalf("err %v, totals %+v", err, b.Totals())
		}
	})
	t.Run("refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := ln.Addr().String()
		_ = ln.Close()
		b := newBreaker(t, 100)
		_, err = dial(t, closed, b).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ok"})
		if status.Code(err) != codes.Unavailable || outcome(t, b) != breaker.Failure {
			t.Fatalf("err %v, totals %+v", err, b.Totals())
		}
	})
	t.Run("client message limit", func(t *testing.T) {
		b := newBreaker(t, 100)
		_, err := dial(t, addr, b, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1))).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ok"})
		if status.Code(err) != codes.ResourceExhausted || outcome(t, b) != breaker.Ignore {
			t.Fatalf("a local size limit is not an outage: err %v, totals %+v", err, b.Totals())
		}
	})
}

// TestTransportResourceExhaustedIsAFailure: a peer that resets every stream
// with ENHANCE_YOUR_CALM (an overloaded server or proxy) is an outage,
// unlike a quota answer from the service.
func TestTransportResourceExhaustedIsAFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-done })
	go func() {
		defer close(done)
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(conn, preface); err != nil {
			return
		}
		fr := http2.NewFramer(conn, conn)
		if fr.WriteSettings() != nil {
			return
		}
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			case *http2.HeadersFrame:
				_ = fr.WriteRSTStream(f.StreamID, http2.ErrCodeEnhanceYourCalm)
			}
		}
	}()
	b := newBreaker(t, 100)
	_, err = dial(t, ln.Addr().String(), b).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ok"})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("want ResourceExhausted from the reset, got %v", err)
	}
	if got := outcome(t, b); got != breaker.Failure {
		t.Fatalf("transport ResourceExhausted counted as %s, want failure", got)
	}
}

// TestOpenCircuitSendsNothing: once open, calls fail with Unavailable and
// ErrOpen, and the server handles no RPC.
func TestOpenCircuitSendsNothing(t *testing.T) {
	addr, h := serve(t)
	b := newBreaker(t, 2)
	c := dial(t, addr, b)
	for range 2 {
		_, _ = c.Check(context.Background(), &healthpb.HealthCheckRequest{Service: fmt.Sprintf("code/%d", codes.Unavailable)})
	}
	if b.State() != breaker.Open {
		t.Fatalf("state %s, want OPEN", b.State())
	}
	before := h.rpcs.Load()
	for range 20 {
		_, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ok"})
		if status.Code(err) != codes.Unavailable || !errors.Is(err, breaker.ErrOpen) || !strings.Contains(err.Error(), `"account"`) {
			t.Fatalf("want Unavailable matching ErrOpen and naming the circuit, got %v", err)
		}
		s, err := c.Watch(context.Background(), &healthpb.HealthCheckRequest{Service: "ok"})
		if s != nil || !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("stream: want ErrOpen, got %v", err)
		}
	}
	if n := h.rpcs.Load() - before; n != 0 {
		t.Fatalf("the server handled %d RPCs from an open circuit", n)
	}
	if got := b.Totals().NotPermitted; got != 40 {
		t.Fatalf("not permitted %d, want 40", got)
	}
}

// TestStreams: a stream's outcome is recorded when it ends, however it ends.
func TestStreams(t *testing.T) {
	addr, _ := serve(t)
	drain := func(s healthpb.Health_WatchClient) error {
		for {
			if _, err := s.Recv(); err != nil {
				return err
			}
		}
	}
	t.Run("to the end", func(t *testing.T) {
		b := newBreaker(t, 100)
		s, err := dial(t, addr, b).Watch(context.Background(), &healthpb.HealthCheckRequest{Service: "ok"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
		if tot := b.Totals(); tot.Successful+tot.Failed+tot.Ignored != 0 {
			t.Fatalf("recorded mid-stream: %+v", tot)
		}
		if err := drain(s); err != io.EOF {
			t.Fatal(err)
		}
		if got := outcome(t, b); got != breaker.Success {
			t.Fatalf("got %s", got)
		}
	})
	for _, tc := range []struct {
		code codes.Code
		want breaker.Outcome
	}{{codes.Unavailable, breaker.Failure}, {codes.NotFound, breaker.Ignore}} {
		t.Run(tc.code.String(), func(t *testing.T) {
			b := newBreaker(t, 100)
			s, err := dial(t, addr, b).Watch(context.Background(), &healthpb.HealthCheckRequest{Service: fmt.Sprintf("code/%d", tc.code)})
			if err != nil {
				t.Fatal(err)
			}
			if err := drain(s); status.Code(err) != tc.code {
				t.Fatalf("stream ended with %v", err)
			}
			if got := outcome(t, b); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
	t.Run("abandoned by cancel", func(t *testing.T) {
		b := newBreaker(t, 100)
		ctx, cancel := context.WithCancel(context.Background())
		s, err := dial(t, addr, b).Watch(ctx, &healthpb.HealthCheckRequest{Service: "hang"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
		cancel() // never reads again
		deadline := time.Now().Add(5 * time.Second)
		for b.Totals().Ignored == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if got := outcome(t, b); got != breaker.Ignore {
			t.Fatalf("got %s", got)
		}
	})
	t.Run("deadline mid-stream", func(t *testing.T) {
		b := newBreaker(t, 100)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		s, err := dial(t, addr, b).Watch(ctx, &healthpb.HealthCheckRequest{Service: "hang"})
		if err != nil {
			t.Fatal(err)
		}
		if err := drain(s); status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("stream ended with %v", err)
		}
		if got := outcome(t, b); got != breaker.Failure {
			t.Fatalf("got %s", got)
		}
	})
}

// TestFailOnCodes: one call site may count server quotas as failures.
func TestFailOnCodes(t *testing.T) {
	addr, _ := serve(t)
	b := newBreaker(t, 100)
	cls := breakergrpc.FailOnCodes(breakergrpc.DefaultClassifier, codes.ResourceExhausted)
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(breakergrpc.UnaryClientInterceptor(breakergrpc.One(b), breakergrpc.Config{Classify: cls})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	_, _ = healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{Service: fmt.Sprintf("code/%d", codes.ResourceExhausted)})
	if got := outcome(t, b); got != breaker.Failure {
		t.Fatalf("got %s", got)
	}
}

// TestByMethod: per-method circuits on one connection; a method without one
// is called directly, even while another method's circuit is open.
func TestByMethod(t *testing.T) {
	addr, h := serve(t)
	check := newBreaker(t, 100)
	check.ForceOpen()
	pick := func(m string) *breaker.Breaker {
		if m == healthpb.Health_Check_FullMethodName {
			return check
		}
		return nil
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(breakergrpc.UnaryClientInterceptor(pick, breakergrpc.Config{})),
		grpc.WithStreamInterceptor(breakergrpc.StreamClientInterceptor(pick, breakergrpc.Config{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := healthpb.NewHealthClient(cc)
	if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ok"}); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("Check: want ErrOpen, got %v", err)
	}
	s, err := c.Watch(context.Background(), &healthpb.HealthCheckRequest{Service: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := s.Recv(); err != nil {
			if err != io.EOF {
				t.Fatal(err)
			}
			break
		}
	}
	if h.rpcs.Load() != 1 {
		t.Fatalf("server handled %d RPCs, want only the Watch", h.rpcs.Load())
	}
}
