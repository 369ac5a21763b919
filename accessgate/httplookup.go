package accessgate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// StatusError is a permission service answer other than 200. A 4xx means
// the service rejected the check itself (credentials, URL): a configuration
// problem, logged at error level, and still unavailable rather than a
// denial. The circuit (breakerhttp's default classifier) ignores 4xx, so it
// does not open on it either; a 5xx is a failure there.
type StatusError struct {
	Code int
}

// Error says which status the permission service answered.
func (e *StatusError) Error() string {
	return fmt.Sprintf("accessgate: permission service answered %d", e.Code)
}

var errBadAnswer = errors.New("accessgate: permission service answer is neither true, false nor {\"allowed\": bool}")

// HTTPLookup asks a permission service over HTTP. Give it a client whose
// transport is a circuit for this call site, for example
// breakerhttp.Policy{Breaker: circuits.Get("account-access"), Timeout: 10 * time.Second}.Client():
// timeout inside the circuit, no retry (the gate is on the request path).
type HTTPLookup struct {
	// Client sends the request. Required.
	Client *http.Client
	// Request builds the request for one check. Required; Query builds the
	// common shape.
	Request func(ctx context.Context, subject, resource string) (*http.Request, error)
}

// Query returns a Request builder for GET base?subject=S&resource=R with
// the given headers (for example an internal secret; it is never logged).
// A base that does not parse fails every check, with the parse error.
func Query(base string, header http.Header) func(ctx context.Context, subject, resource string) (*http.Request, error) {
	u, perr := url.Parse(base)
	if perr != nil {
		perr = fmt.Errorf("accessgate: permission service URL: %w", perr)
	}
	return func(ctx context.Context, subject, resource string) (*http.Request, error) {
		if perr != nil {
			return nil, perr
		}
		q := u.Query()
		q.Set("subject", subject)
		q.Set("resource", resource)
		ru := *u
		ru.RawQuery = q.Encode()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, ru.String(), nil)
		if err != nil {
			return nil, err
		}
		for k, v := range header {
			req.Header[k] = append([]string(nil), v...)
		}
		return req, nil
	}
}

// answerLimit bounds how much of an answer is read.
const answerLimit = 4 << 10

// Check implements Lookup: a 200 whose body is true, false, or a JSON
// object with a boolean "allowed".
func (l *HTTPLookup) Check(ctx context.Context, subject, resource string) (bool, error) {
	if l.Client == nil || l.Request == nil {
		return false, errors.New("accessgate: HTTPLookup needs Client and Request")
	}
	req, err := l.Request(ctx, subject, resource)
	if err != nil {
		return false, err
	}
	resp, err := l.Client.Do(req)
	if err != nil {
		return false, err
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, answerLimit))
		_ = resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		return false, &StatusError{Code: resp.StatusCode}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, answerLimit))
	if err != nil {
		return false, fmt.Errorf("accessgate: reading the permission service answer: %w", err)
	}
	body = bytes.TrimSpace(body)
	switch string(body) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	var obj struct {
		Allowed *bool `json:"allowed"`
	}
	if err := json.Unmarshal(body, &obj); err != nil || obj.Allowed == nil {
		return false, errBadAnswer
	}
	return *obj.Allowed, nil
}
