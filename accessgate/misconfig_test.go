package accessgate_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/tripswitch-dev/tripswitch/accessgate"
)

// TestNewRefusesAMisconfiguredHTTPLookup: a lookup that can never ask
// anything is refused by New, naming the field, instead of failing every
// check as a "network error" that a fail-open gate allows.
func TestNewRefusesAMisconfiguredHTTPLookup(t *testing.T) {
	q := accessgate.Query("http://account.internal/access", nil)
	for _, tc := range []struct {
		name   string
		lookup *accessgate.HTTPLookup
		want   string
	}{
		{"no client", &accessgate.HTTPLookup{Request: q}, "HTTPLookup.Client"},
		{"no request builder", &accessgate.HTTPLookup{Client: http.DefaultClient}, "HTTPLookup.Request"},
		{"a base URL that does not parse", &accessgate.HTTPLookup{Client: http.DefaultClient, Request: accessgate.Query("http://account internal/%zz", nil)}, "HTTPLookup.Request"},
		{"a relative base URL", &accessgate.HTTPLookup{Client: http.DefaultClient, Request: accessgate.Query("account/access", nil)}, "absolute http or https URL"},
		{"another scheme", &accessgate.HTTPLookup{Client: http.DefaultClient, Request: accessgate.Query("ftp://account/access", nil)}, "absolute http or https URL"},
	} {
		for _, when := range []accessgate.WhenUnavailable{accessgate.RejectWhenUnavailable, accessgate.AllowWhenUnavailable} {
			g, err := accessgate.New(accessgate.Config{Lookup: tc.lookup, WhenUnavailable: when, Logger: discard()})
			if err == nil {
				allowed := g.Check(context.Background(), "alice", "orders") == nil
				g.Close()
				t.Errorf("%s: New accepted it (a check then allowed: %v)", tc.name, allowed)
				continue
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
			}
		}
	}
}

// TestARequestThatCannotBeBuiltIsAMisconfiguration: a builder that fails
// for some check (it passed New's trial) is a configuration problem: a
// fail-open gate refuses it, and the log says so in fixed words.
func TestARequestThatCannotBeBuiltIsAMisconfiguration(t *testing.T) {
	var logs bytes.Buffer
	build := func(ctx context.Context, subject, resource string) (*http.Request, error) {
		if resource == "orders" {
			return nil, errors.New("no route for orders?subject=" + subject)
		}
		return http.NewRequestWithContext(ctx, http.MethodGet, "http://account.internal/access", nil)
	}
	g, err := accessgate.New(accessgate.Config{WhenUnavailable: accessgate.AllowWhenUnavailable,
		Lookup: &accessgate.HTTPLookup{Client: http.DefaultClient, Request: build},
		Logger: slog.New(slog.NewJSONHandler(&syncWriter{w: &logs}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	unavailableMisconfigured(t, g.Check(context.Background(), "alice", "orders"), "a request that cannot be built")
	s := logs.String()
	if !strings.Contains(s, `"level":"ERROR"`) || !strings.Contains(s, `"error":"request cannot be built"`) {
		t.Errorf("log %s, want an error line saying the request cannot be built", s)
	}
	if strings.Contains(s, "alice") || strings.Contains(s, "errorString") {
		t.Errorf("log %s carries the subject or a Go type name", s)
	}
}

// TestUnclassifiedErrorsAreLoggedInFixedWords: a custom lookup's error is
// not echoed (it may carry identifiers), nor is its Go type.
func TestUnclassifiedErrorsAreLoggedInFixedWords(t *testing.T) {
	var logs bytes.Buffer
	g, err := accessgate.New(accessgate.Config{Logger: slog.New(slog.NewJSONHandler(&syncWriter{w: &logs}, nil)),
		Lookup: accessgate.LookupFunc(func(context.Context, string, string) (bool, error) { return false, errors.New("token abc123 rejected") })})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	_ = g.Check(context.Background(), "alice", "orders")
	if s := logs.String(); strings.Contains(s, "abc123") || strings.Contains(s, "*errors.errorString") || !strings.Contains(s, `"error":"unclassified error"`) {
		t.Errorf("log %s, want a fixed description", s)
	}
}
