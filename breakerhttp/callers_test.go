package breakerhttp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breakerhttp"
)

// TestTransportIgnoresACallerCancelledWithACause: on Go 1.26 net/http
// returns context.Cause, not context.Canceled, for a request whose context
// was canceled with a cause. The circuit judges the caller's context.
func TestTransportIgnoresACallerCancelledWithACause(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Hour} {
		t.Run("timeout "+timeout.String(), func(t *testing.T) {
			arrived := make(chan struct{})
			srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(arrived)
				<-r.Context().Done()
			}))
			b := newBreaker(t, 1, newClock())
			c := client(t, &breakerhttp.Transport{Breaker: b, Base: base(t), Timeout: timeout})
			ctx, cancel := context.WithCancelCause(context.Background())
			cause := errors.New("client went away")
			go func() { <-arrived; cancel(cause) }()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			resp, err := c.Do(req)
			if err == nil {
				resp.Body.Close()
				t.Fatal("no error")
			}
			if !errors.Is(err, cause) {
				t.Fatalf("err = %v, want the cause", err)
			}
			if m := b.Metrics(); m.FailedCalls != 0 || m.Calls != 0 {
				t.Fatalf("metrics = %+v, want the call ignored", m)
			}
		})
	}
}

// TestTransportIgnoresACauseWhileReadingTheBody: the caller cancels with
// a cause while the body streams in.
func TestTransportIgnoresACauseWhileReadingTheBody(t *testing.T) {
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("part"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	b := newBreaker(t, 1, newClock())
	c := client(t, &breakerhttp.Transport{Breaker: b, Base: base(t)})
	ctx, cancel := context.WithCancelCause(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 4)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	cancel(errors.New("client went away"))
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("read after the cancel succeeded")
	}
	if m := b.Metrics(); m.FailedCalls != 0 {
		t.Fatalf("metrics = %+v, want the call ignored", m)
	}
}
