// Package breakergrpc puts circuit breakers on grpc-go client calls, with
// unary and streaming client interceptors.
//
// What counts (the [DefaultClassifier]): Unavailable (which is also what a
// refused or broken connection becomes), DeadlineExceeded, Internal,
// Unknown, DataLoss and ResourceExhausted raised by the transport (an
// HTTP/2 RST_STREAM, as an overloaded server or proxy sends) are failures;
// InvalidArgument, NotFound, PermissionDenied, Unauthenticated,
// AlreadyExists, FailedPrecondition, Aborted, OutOfRange, Unimplemented,
// ResourceExhausted from the server (a quota, gRPC's 429) or from the
// client's own message-size limit, the caller's cancellation and an error
// matching breaker.ErrNotCalled (a concurrency limit's rejection, from an
// interceptor of your own too) are ignored: they are about the request or
// the caller, not an outage. The
// interceptors judge the caller's context before the classifier: any error
// of a call whose context the caller canceled is ignored, since a context
// canceled with a cause does not make the error context.Canceled.
// grpc-go gives a transport's ResourceExhausted and a server's the same
// code, so the transport's is told by the message grpc-go writes for a
// reset stream ("stream terminated by RST_STREAM ..."); use [FailOnCodes]
// or a Classifier of your own to decide otherwise.
//
// An open circuit answers without sending anything, with an error whose
// gRPC status is Unavailable and that matches breaker.ErrOpen.
// Config.Limits puts a concurrency limit (limit.Bulkhead or limit.Adaptive)
// on a call site inside its circuit; a call beyond it is rejected before
// anything is sent with status ResourceExhausted (matching
// limit.ErrLimited), which the circuit ignores. With
// Config.ServerPushback, a server's RetryInfo or grpc-retry-pushback-ms
// opens the circuit for as long as it asks, capped.
//
// A stream's outcome is recorded when it ends: RecvMsg returning io.EOF
// (success) or an error, the single response of a client-streaming call,
// or the stream's context ending. Read streams to the end or cancel their
// context, as grpc-go requires anyway.
package breakergrpc

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/limit"
)

// Classifier decides what a call's final error means to the circuit.
type Classifier func(err error) breaker.Outcome

// DefaultClassifier is described in the package documentation.
func DefaultClassifier(err error) breaker.Outcome {
	if err == nil {
		return breaker.Success
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, breaker.ErrNotCalled) {
		return breaker.Ignore
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return breaker.Failure
	}
	s, ok := status.FromError(err)
	if !ok {
		return breaker.Failure // not a gRPC status: the call did not get an answer
	}
	switch s.Code() {
	case codes.OK:
		return breaker.Success
	case codes.Unavailable, codes.DeadlineExceeded, codes.Internal, codes.Unknown, codes.DataLoss:
		return breaker.Failure
	case codes.ResourceExhausted:
		if fromTransport(s) {
			return breaker.Failure
		}
		return breaker.Ignore
	}
	return breaker.Ignore
}

// fromTransport reports whether s was raised by grpc-go's HTTP/2 transport
// because the peer reset the stream (RST_STREAM), rather than returned by
// the server's handler or produced by a local check.
//
// grpc-go gives the two no different code, so this matches the message its
// transport writes ("stream terminated by RST_STREAM ..."). A server whose
// handler returns a status with that message text is taken for the
// transport: its ResourceExhausted counts as a failure instead of being
// ignored. Only a server that copies grpc-go's wording can cause that, and
// FailOnCodes or a Classifier of your own decides otherwise if it matters.
func fromTransport(s *status.Status) bool {
	return strings.HasPrefix(s.Message(), "stream terminated by RST_STREAM")
}

// FailOnCodes counts the given codes as failures and defers to next for
// everything else: FailOnCodes(DefaultClassifier, codes.ResourceExhausted)
// opens a call site's circuit on server quotas too.
func FailOnCodes(next Classifier, cs ...codes.Code) Classifier {
	return func(err error) breaker.Outcome {
		if err != nil {
			c := status.Code(err)
			for _, f := range cs {
				if c == f {
					return breaker.Failure
				}
			}
		}
		return next(err)
	}
}

// Circuits picks the circuit for a call by its full method name
// ("/pkg.Service/Method"). A nil result calls the method without a circuit.
// Use One for a single circuit, or a function of the method so that call
// sites that fail for different reasons (a permission check and a list
// lookup) get circuits of their own.
type Circuits func(fullMethod string) *breaker.Breaker

// One sends every call through circuit b.
func One(b *breaker.Breaker) Circuits {
	return func(string) *breaker.Breaker { return b }
}

// Config configures an interceptor. The zero value is the default.
type Config struct {
	// Classify decides what a call's final error means to the circuit; nil
	// means DefaultClassifier.
	Classify Classifier
	// ServerPushback opts into the server's word on when to come back: a
	// failed call whose status carries google.rpc.RetryInfo, or whose
	// trailers carry grpc-retry-pushback-ms (gRFC A6; a negative or
	// malformed value is ignored), opens the circuit for that long
	// (Breaker.OpenFor), never longer than the breaker's
	// Config.OpenUntilCap. The call's own outcome is classified as usual.
	// It adds a trailer call option to each unary call.
	ServerPushback bool
	// Limits picks the concurrency limit for a call by its full method
	// name (nil, or a nil result: none). The limit is inside the circuit:
	// a call the circuit admits takes a permit, held until the call (or
	// stream) ends. A call beyond it is rejected before anything is sent,
	// with a LimitedError (status ResourceExhausted, errors.Is
	// limit.ErrLimited); the circuit ignores it.
	Limits func(fullMethod string) limit.Limiter
}

func (c Config) limiter(method string) limit.Limiter {
	if c.Limits == nil {
		return nil
	}
	return c.Limits(method)
}

// LimitedError is the rejection of a call by its concurrency limit. Its
// gRPC status is ResourceExhausted, and errors.Is(err, limit.ErrLimited)
// holds. Not Unavailable, the open circuit's code: retry policies commonly
// retry Unavailable, and a limit's rejection must not be retried (it would
// add to the load the limit sheds).
type LimitedError struct {
	*limit.LimitedError
}

// GRPCStatus makes status.Code report ResourceExhausted.
func (e LimitedError) GRPCStatus() *status.Status {
	return status.New(codes.ResourceExhausted, e.Error())
}

// Unwrap returns the limit's rejection.
func (e LimitedError) Unwrap() error { return e.LimitedError }

// acquire takes l's permit for a call the circuit admitted with pm; on a
// rejection pm is given back as ignored (nothing was sent).
func acquire(ctx context.Context, l limit.Limiter, pm *breaker.Permit) (limit.Permit, error) {
	if l == nil {
		return limit.Permit{}, nil
	}
	lp, err := l.Acquire(ctx)
	if err == nil {
		return lp, nil
	}
	pm.Done(breaker.Ignore)
	var le *limit.LimitedError
	if errors.As(err, &le) {
		return lp, LimitedError{le}
	}
	return lp, status.FromContextError(err).Err()
}

func (c Config) classify() Classifier {
	if c.Classify == nil {
		return DefaultClassifier
	}
	return c.Classify
}

// OpenError is the rejection of a call by an open circuit. Its gRPC status
// is Unavailable, and errors.Is(err, breaker.ErrOpen) holds.
type OpenError struct {
	*breaker.OpenError
}

// GRPCStatus makes status.Code report Unavailable.
func (e OpenError) GRPCStatus() *status.Status {
	return status.New(codes.Unavailable, e.Error())
}

// Unwrap returns the breaker's rejection.
func (e OpenError) Unwrap() error { return e.OpenError }

// judge classifies a call's error for a caller whose context is ctx: once
// the caller canceled it, the call is ignored whatever the error says (a
// context canceled with a cause may come back as that cause, or as a status
// built from it), and otherwise classify decides. A deadline is classify's
// to judge (DefaultClassifier: a failure).
func judge(ctx context.Context, classify Classifier, err error) breaker.Outcome {
	if err != nil && breaker.CallerCanceled(ctx) {
		return breaker.Ignore
	}
	return classify(err)
}

// honorPushback opens b for as long as a failed call's server asked:
// RetryInfo in the status details first, else the pushback trailer.
func honorPushback(b *breaker.Breaker, err error, trailer metadata.MD) {
	if st, ok := status.FromError(err); ok {
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
				if err := ri.GetRetryDelay().CheckValid(); err == nil {
					b.OpenFor(ri.GetRetryDelay().AsDuration())
				}
				return
			}
		}
	}
	if v := trailer.Get("grpc-retry-pushback-ms"); len(v) > 0 {
		if d, ok := breaker.ParseWait(v[0], time.Millisecond); ok {
			b.OpenFor(d) // OpenFor caps it
		}
	}
}

// allow admits a call through b; a nil b (no circuit for the method)
// admits it with an inert permit.
func allow(b *breaker.Breaker) (breaker.Permit, error) {
	if b == nil {
		return breaker.Permit{}, nil
	}
	pm, err := b.Allow()
	if err != nil {
		var oe *breaker.OpenError
		if errors.As(err, &oe) {
			return pm, OpenError{oe}
		}
		return pm, err
	}
	return pm, nil
}

// UnaryClientInterceptor sends each unary call through the circuit that
// circuits picks for it. Put a per-call timeout on the context (or a
// deadline interceptor before this one) so that it is inside the circuit
// and counted.
//
// Retries belong outside the circuit, so that it counts every attempt. A
// retry policy in the channel's service config runs inside grpc-go's
// ClientConn, below every interceptor: the circuit would see one call for
// all its attempts. Turn it off (grpc.WithDisableRetry()) and retry in an
// interceptor placed before this one, or in the caller.
func UnaryClientInterceptor(circuits Circuits, cfg Config) grpc.UnaryClientInterceptor {
	classify := cfg.classify()
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		cb, lim := circuits(method), cfg.limiter(method)
		if cb == nil && lim == nil {
			return invoker(ctx, method, req, reply, cc, callOpts...)
		}
		if err := ctx.Err(); err != nil {
			return status.FromContextError(err).Err()
		}
		pm, err := allow(cb)
		if err != nil {
			return err
		}
		lp, err := acquire(ctx, lim, &pm)
		if err != nil {
			return err
		}
		defer lp.End(ctx)
		var trailer metadata.MD
		if cfg.ServerPushback {
			callOpts = append(callOpts[:len(callOpts):len(callOpts)], grpc.Trailer(&trailer))
		}
		err = invoker(ctx, method, req, reply, cc, callOpts...)
		pm.Done(judge(ctx, classify, err))
		if cfg.ServerPushback && err != nil && cb != nil {
			honorPushback(cb, err, trailer)
		}
		return err
	}
}

// StreamClientInterceptor sends each stream through the circuit that
// circuits picks for it; the outcome is recorded when the stream ends.
func StreamClientInterceptor(circuits Circuits, cfg Config) grpc.StreamClientInterceptor {
	classify := cfg.classify()
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		cb, lim := circuits(method), cfg.limiter(method)
		if cb == nil && lim == nil {
			return streamer(ctx, desc, cc, method, callOpts...)
		}
		if err := ctx.Err(); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		pm, err := allow(cb)
		if err != nil {
			return nil, err
		}
		lp, err := acquire(ctx, lim, &pm)
		if err != nil {
			return nil, err
		}
		cs, err := streamer(ctx, desc, cc, method, callOpts...)
		if err != nil {
			pm.Done(judge(ctx, classify, err))
			lp.End(ctx)
			return nil, err
		}
		s := &stream{ClientStream: cs, ctx: ctx, classify: classify, serverStreams: desc.ServerStreams, pm: pm, lp: lp}
		if cfg.ServerPushback && cb != nil {
			s.pushback = cb
		}
		// A stream abandoned by cancelling the caller's context may never
		// return from RecvMsg to us; that context tells how it ended. (The
		// stream's own context is cancelled on every ending, success too.)
		stop := context.AfterFunc(ctx, func() {
			s.pm.Done(judge(ctx, classify, ctx.Err()))
			s.lp.End(ctx)
		})
		s.stop.Store(&stop)
		return s, nil
	}
}

type stream struct {
	grpc.ClientStream
	ctx           context.Context // the caller's
	classify      Classifier
	serverStreams bool
	stop          atomic.Pointer[func() bool] // releases the context watch
	pushback      *breaker.Breaker            // set with Config.ServerPushback

	pm breaker.Permit // the first ending decides; later ones record nothing
	lp limit.Permit   // given back at the first ending
}

func (s *stream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	switch {
	case err == io.EOF:
		s.finish(breaker.Success)
	case err != nil:
		s.finish(judge(s.ctx, s.classify, err))
		if s.pushback != nil {
			honorPushback(s.pushback, err, s.Trailer())
		}
	case !s.serverStreams:
		s.finish(breaker.Success) // the one response of a unary-response stream
	}
	return err
}

func (s *stream) finish(o breaker.Outcome) {
	s.pm.Done(o)
	s.lp.End(s.ctx)
	if stop := s.stop.Load(); stop != nil {
		(*stop)()
	}
}
