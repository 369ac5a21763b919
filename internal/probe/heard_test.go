package probe

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestABlockedProbeCountsOnlyTheWebhooksSilence: a probe blocked behind a
// held request counts that request's silence, never an answer the webhook
// sent that this controller has not taken yet (a starved controller holds
// such a request long after the webhook answered: counted, a 2 s pause
// opened a healthy webhook's circuit). On a real connection: nothing
// received since the write is a confirmed timeout; an answer waiting unread,
// makes the probe Discarded; an answer begun, read, and never finished is
// counted (judged on the controller's stalls, as any unconfirmed timeout).
func TestABlockedProbeCountsOnlyTheWebhooksSilence(t *testing.T) {
	if !canReadWire {
		t.Skip("the kernel's counts of received bytes are read on Linux only")
	}
	const timeout = 250 * time.Millisecond
	for _, tc := range []struct {
		name string
		// wrote is how long before the probe the request was written.
		wrote time.Duration
		// answer: the webhook answers; read: the controller read it.
		answer, read bool
		want         Status
		confirmed    bool
	}{
		{name: "silent for its whole timeout", wrote: 2 * timeout, want: Unhealthy, confirmed: true},
		{name: "answered late, waiting unread", wrote: 2 * timeout, answer: true, want: Discarded},
		{name: "answered in time, waiting unread", wrote: 0, answer: true, want: Discarded},
		{name: "part of an answer read, the rest never came", wrote: 2 * timeout, answer: true, read: true, want: Unhealthy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := pair(t)
			rc, err := client.(*net.TCPConn).SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			w := newWire(rc)
			// The handshake's bytes: what the connection received before
			// the request (the kernel counts nothing until a first byte).
			if _, err := server.Write([]byte("hello")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(client, make([]byte, 5)); err != nil {
				t.Fatal(err)
			}
			base, _, ok := w.received()
			if !ok {
				t.Fatal("the kernel counts nothing received")
			}
			if _, err := client.Write([]byte("request")); err != nil {
				t.Fatal(err)
			}
			d := &destination{}
			f := d.hold(func() {})
			f.mark(w, base)
			f.wroteAt = time.Now().Add(-tc.wrote)
			if tc.answer {
				if _, err := server.Write([]byte("answer")); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the answer in the kernel", func() bool { b, _, _ := w.received(); return b > base })
				if tc.read {
					if _, err := io.ReadFull(client, make([]byte, 6)); err != nil {
						t.Fatal(err)
					}
				}
			} else {
				time.Sleep(10 * time.Millisecond) // the silence is the webhook's
			}
			r := d.blocked("k", timeout, 0)
			if r.Status != tc.want || (r.Status == Unhealthy && !r.TimedOut != tc.confirmed) {
				t.Fatalf("got %s (timed out %v, unconfirmed): %s; want %s, confirmed %v", r.Status, r.TimedOut, r.Reason, tc.want, tc.confirmed)
			}
			if r.Status == Discarded && r.Discard != DiscardBlocked {
				t.Fatalf("discarded as %s, want %s", r.Discard, DiscardBlocked)
			}
		})
	}
}

// pair is a connected TCP pair on 127.0.0.1.
func pair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return client, server
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
