package breakergrpc_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breaker/manualclock"
	"github.com/tripswitch-dev/tripswitch/breakergrpc"
)

// shedding answers every call and stream with Unavailable, carrying the
// RetryInfo or pushback trailer its fields say.
type shedding struct {
	healthpb.UnimplementedHealthServer
	retryInfo time.Duration // 0: none
	pushback  string        // "": none
}

func (s *shedding) fail(ctx context.Context, setTrailer func(metadata.MD)) error {
	if s.pushback != "" {
		setTrailer(metadata.Pairs("grpc-retry-pushback-ms", s.pushback))
	}
	st := status.New(codes.Unavailable, "shedding load")
	if s.retryInfo > 0 {
		st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(s.retryInfo)})
	}
	return st.Err()
}

func (s *shedding) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return nil, s.fail(ctx, func(md metadata.MD) { _ = grpc.SetTrailer(ctx, md) })
}

func (s *shedding) Watch(_ *healthpb.HealthCheckRequest, ws healthpb.Health_WatchServer) error {
	return s.fail(ws.Context(), ws.SetTrailer)
}

func TestServerPushbackOpensTheCircuit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		srv      shedding
		optIn    bool
		wantOpen time.Duration // 0: stays closed
	}{
		{"RetryInfo", shedding{retryInfo: 40 * time.Second}, true, 40 * time.Second},
		{"pushback trailer", shedding{pushback: "1500"}, true, 1500 * time.Millisecond},
		{"RetryInfo wins over the trailer", shedding{retryInfo: 40 * time.Second, pushback: "1500"}, true, 40 * time.Second},
		{"capped", shedding{retryInfo: time.Hour}, true, 2 * time.Minute},
		{"the longest pushback a Duration holds is capped", shedding{pushback: "9223372036854"}, true, 2 * time.Minute},
		{"a pushback past a Duration saturates, then is capped", shedding{pushback: "9223372036855"}, true, 2 * time.Minute},
		{"a pushback past an int64 saturates too", shedding{pushback: "99999999999999999999999"}, true, 2 * time.Minute},
		{"a negative pushback is ignored", shedding{pushback: "-1"}, true, 0},
		{"without the opt-in nothing happens", shedding{retryInfo: 40 * time.Second}, false, 0},
	} {
		for _, streaming := range []bool{false, true} {
			name := tc.name + map[bool]string{false: " (unary)", true: " (stream)"}[streaming]
			t.Run(name, func(t *testing.T) {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				gs := grpc.NewServer()
				srv := tc.srv
				healthpb.RegisterHealthServer(gs, &srv)
				go func() { _ = gs.Serve(ln) }()
				t.Cleanup(gs.Stop)
				clk := manualclock.New(time.Unix(1000, 0))
				b, err := breaker.New("account", breaker.Config{MinimumNumberOfCalls: 100, OpenUntilCap: 2 * time.Minute, Clock: clk})
				if err != nil {
					t.Fatal(err)
				}
				cfg := breakergrpc.Config{ServerPushback: tc.optIn}
				cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
					grpc.WithUnaryInterceptor(breakergrpc.UnaryClientInterceptor(breakergrpc.One(b), cfg)),
					grpc.WithStreamInterceptor(breakergrpc.StreamClientInterceptor(breakergrpc.One(b), cfg)))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = cc.Close() })
				hc := healthpb.NewHealthClient(cc)
				call := func() error {
					if !streaming {
						_, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
						return err
					}
					ws, err := hc.Watch(context.Background(), &healthpb.HealthCheckRequest{})
					if err != nil {
						return err
					}
					_, err = ws.Recv()
					return err
				}
				if err := call(); status.Code(err) != codes.Unavailable {
					t.Fatalf("first call: %v, want the server's Unavailable", err)
				}
				if tc.wantOpen == 0 {
					if s := b.State(); s != breaker.Closed {
						t.Fatalf("state %s, want CLOSED", s)
					}
					return
				}
				err = call()
				var oe *breaker.OpenError
				if !errors.As(err, &oe) || !oe.Until.Equal(clk.Now().Add(tc.wantOpen)) {
					t.Fatalf("second call: %v, want open until now+%v", err, tc.wantOpen)
				}
			})
		}
	}
}
