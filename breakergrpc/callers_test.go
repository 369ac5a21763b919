package breakergrpc_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breakergrpc"
)

// TestUnaryIgnoresACallerCancelledWithACause: whatever error a call
// returns once its caller canceled the context with a cause (an inner
// interceptor's wrapping, a status built from context.Cause), the caller
// gave up: the call is ignored. A deadline stays a failure.
func TestUnaryIgnoresACallerCancelledWithACause(t *testing.T) {
	cause := errors.New("client went away")
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"a wrapped cause", fmt.Errorf("rpc: %w", cause)},
		{"an Unavailable status carrying the cause", status.Error(codes.Unavailable, cause.Error())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBreaker(t, 1)
			ic := breakergrpc.UnaryClientInterceptor(breakergrpc.One(b), breakergrpc.Config{})
			ctx, cancel := context.WithCancelCause(context.Background())
			err := ic(ctx, "/svc/M", nil, nil, nil, func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
				cancel(cause)
				return tc.err
			})
			if err != tc.err {
				t.Fatalf("err = %v, want the invoker's", err)
			}
			if got := outcome(t, b); got != breaker.Ignore {
				t.Fatalf("outcome = %v, want ignore", got)
			}
		})
	}
}

// TestStreamIgnoresACallerCancelledWithACause: the same for a stream whose
// RecvMsg fails after the caller canceled with a cause.
func TestStreamIgnoresACallerCancelledWithACause(t *testing.T) {
	b := newBreaker(t, 1)
	ic := breakergrpc.StreamClientInterceptor(breakergrpc.One(b), breakergrpc.Config{})
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("client went away")
	cs, err := ic(ctx, &grpc.StreamDesc{ServerStreams: true}, nil, "/svc/M", func(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
		return failingStream{err: status.Error(codes.Unavailable, cause.Error()), before: func() { cancel(cause) }}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = cs.RecvMsg(nil)
	if got := outcome(t, b); got != breaker.Ignore {
		t.Fatalf("outcome = %v, want ignore", got)
	}
}

type failingStream struct {
	grpc.ClientStream
	err    error
	before func()
}

func (s failingStream) RecvMsg(any) error { s.before(); return s.err }
