package breakerhttp_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breakerhttp"
)

// BenchmarkRoundTrip compares a GET on a keep-alive loopback server through
// a bare transport and through a circuit (with and without a per-attempt
// timeout, and with totals counted as breakerprom does), in the same run.
func BenchmarkRoundTrip(b *testing.B) {
	srv := newServer(b, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	run := func(b *testing.B, rt http.RoundTripper) {
		c := &http.Client{Transport: rt}
		b.ReportAllocs()
		for b.Loop() {
			resp, err := c.Get(srv.URL)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	}
	cb := func(b *testing.B) *breaker.Breaker {
		x, err := breaker.New("bench", breaker.Config{})
		if err != nil {
			b.Fatal(err)
		}
		return x
	}
	b.Run("bare", func(b *testing.B) { run(b, base(b)) })
	b.Run("circuit", func(b *testing.B) { run(b, &breakerhttp.Transport{Breaker: cb(b), Base: base(b)}) })
	b.Run("circuit+timeout", func(b *testing.B) {
		run(b, &breakerhttp.Transport{Breaker: cb(b), Base: base(b), Timeout: 10 * time.Second})
	})
	b.Run("circuit+totals", func(b *testing.B) {
		x := cb(b)
		x.EnableTotals()
		run(b, &breakerhttp.Transport{Breaker: x, Base: base(b)})
	})
}

// BenchmarkOpenFastFail is a request to an open circuit: no network I/O.
func BenchmarkOpenFastFail(b *testing.B) {
	x, err := breaker.New("bench", breaker.Config{})
	if err != nil {
		b.Fatal(err)
	}
	x.Open()
	c := &http.Client{Transport: &breakerhttp.Transport{Breaker: x}}
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/", nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Do(req); err == nil {
			b.Fatal("an open circuit let a request through")
		}
	}
}

type cannedBody struct{ io.Reader }

func (cannedBody) Close() error { return nil }

// BenchmarkOverhead: the circuit's own cost per request (with a body to
// wrap), next to the same in-memory transport without it. The loopback
// round trip of BenchmarkRoundTrip is the denominator of the 2% goal.
func BenchmarkOverhead(b *testing.B) {
	withBody := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: cannedBody{eofReader{}}, Request: req}, nil
	})
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	run := func(b *testing.B, rt http.RoundTripper) {
		b.ReportAllocs()
		buf := make([]byte, 16)
		for b.Loop() {
			resp, _ := rt.RoundTrip(req)
			_, _ = resp.Body.Read(buf)
			_ = resp.Body.Close()
		}
	}
	x, _ := breaker.New("bench", breaker.Config{})
	b.Run("bare", func(b *testing.B) { run(b, withBody) })
	b.Run("circuit", func(b *testing.B) { run(b, &breakerhttp.Transport{Breaker: x, Base: withBody}) })
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }
