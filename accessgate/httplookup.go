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
	"strings"
)

// StatusError is a permission service answer other than 200. A 3xx (a
// redirect, which a permission check never follows) or 4xx means the
// service rejected the check itself or moved (credentials, URL): a
// configuration problem, logged at error level, and still unavailable
// rather than a denial. The circuit (breakerhttp's default classifier)
// ignores 4xx, so it does not open on it either; a 5xx is a failure there.
type StatusError struct {
	Code int
}

// Error says which status the permission service answered.
func (e *StatusError) Error() string {
	return fmt.Sprintf("accessgate: permission service answered %d", e.Code)
}

// errBadAnswer is an answer that is not a decision (see HTTPLookup.Check).
var errBadAnswer = errors.New("accessgate: the permission service's answer is not a decision")

// HTTPLookup asks a permission service over HTTP. Give it a client whose
// transport is a circuit for this call site, for example
// breakerhttp.Policy{Breaker: circuits.Get("account-access"), Timeout: 10 * time.Second}.Client():
// timeout inside the circuit, no retry (the gate is on the request path).
//
// It never follows a redirect, whatever the client's CheckRedirect says: a
// 3xx is a configuration problem (see StatusError), and no request, with
// its headers (an internal secret, Authorization), goes anywhere but where
// Request pointed it.
//
// New refuses an HTTPLookup without Client or Request, and one whose
// Request cannot build a request to an absolute http or https URL: it calls
// Request once, with a placeholder subject and resource, without sending
// anything. A request that cannot be built at check time is a
// misconfiguration too (never allowed by a fail-open gate).
type HTTPLookup struct {
	// Client sends the request. Required.
	Client *http.Client
	// Request builds the request for one check. Required; Query builds the
	// common shape. It must not have side effects: New calls it once to
	// check it.
	Request func(ctx context.Context, subject, resource string) (*http.Request, error)
}

// errBadRequest is matched by the error of a check whose request could not
// be built: no retry fixes that.
var errBadRequest = errors.New("accessgate: the permission check's request cannot be built")

// requestError is a request that could not be built, and why.
type requestError struct{ cause error }

func (e *requestError) Error() string        { return errBadRequest.Error() + ": " + e.cause.Error() }
func (e *requestError) Is(target error) bool { return target == errBadRequest }
func (e *requestError) Unwrap() error        { return e.cause }

// validate is New's check of l (see HTTPLookup).
func (l *HTTPLookup) validate() error {
	switch {
	case l.Client == nil:
		return errors.New("HTTPLookup.Client is required")
	case l.Request == nil:
		return errors.New("HTTPLookup.Request is required (accessgate.Query builds the common one)")
	}
	if _, err := l.build(context.Background(), "accessgate-config-check", "accessgate-config-check"); err != nil {
		return fmt.Errorf("HTTPLookup.Request: %w", err.(*requestError).cause)
	}
	return nil
}

// build calls Request and checks what it built; an error is a
// *requestError.
func (l *HTTPLookup) build(ctx context.Context, subject, resource string) (*http.Request, error) {
	if l.Client == nil || l.Request == nil {
		return nil, &requestError{errors.New("HTTPLookup needs Client and Request")}
	}
	req, err := l.Request(ctx, subject, resource)
	switch {
	case err != nil:
		return nil, &requestError{err}
	case req == nil || req.URL == nil:
		return nil, &requestError{errors.New("no request")}
	case (req.URL.Scheme != "http" && req.URL.Scheme != "https") || req.URL.Host == "":
		return nil, &requestError{fmt.Errorf("%q is not an absolute http or https URL", req.URL.Redacted())}
	}
	return req, nil
}

// Query returns a Request builder for GET base?subject=S&resource=R with
// the given headers (for example an internal secret; it is never logged).
// A base that does not parse fails every check, with the parse error, and
// New refuses the HTTPLookup that uses it.
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

// AnswerLimit is the largest answer body HTTPLookup reads; a longer one is
// not a decision.
const AnswerLimit = 16 << 10

// Check implements Lookup. Only a 200 whose whole body, at most AnswerLimit
// bytes, is one of these JSON texts (RFC 8259) is a decision:
//
//	true                     allow
//	false                    deny
//	{"allowed": true}        allow; other members are allowed and ignored
//	{"allowed": false}       deny
//
// JSON whitespace may surround the value (an encoder's trailing newline).
// The key is exactly "allowed", once, and its value a boolean. Anything else
// is not a decision and fails the check as a configuration problem: a body
// over the limit, trailing data ("true false", "true" then an HTML page), a
// key in another case ("Allowed", "ALLOWED"), a duplicate key, a string
// "true", an HTML error page served with 200.
func (l *HTTPLookup) Check(ctx context.Context, subject, resource string) (bool, error) {
	req, err := l.build(ctx, subject, resource)
	if err != nil {
		return false, err
	}
	client := *l.Client
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	if err != nil {
		return false, err
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, AnswerLimit))
		_ = resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		return false, &StatusError{Code: resp.StatusCode}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, AnswerLimit+1))
	if err != nil {
		return false, fmt.Errorf("accessgate: reading the permission service answer: %w", err)
	}
	if len(body) > AnswerLimit {
		return false, fmt.Errorf("%w: longer than %d bytes", errBadAnswer, AnswerLimit)
	}
	return parseAnswer(body)
}

// parseAnswer reads a decision in the grammar HTTPLookup.Check documents.
func parseAnswer(body []byte) (bool, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return false, fmt.Errorf("%w: %v", errBadAnswer, err)
	}
	var allowed bool
	switch t := tok.(type) {
	case bool:
		allowed = t
	case json.Delim:
		if t != '{' {
			return false, fmt.Errorf("%w: not a boolean or an object", errBadAnswer)
		}
		if allowed, err = parseObject(dec); err != nil {
			return false, err
		}
	default:
		return false, fmt.Errorf("%w: not a boolean or an object", errBadAnswer)
	}
	if _, err := dec.Token(); err != io.EOF {
		return false, fmt.Errorf("%w: data after the answer", errBadAnswer)
	}
	return allowed, nil
}

// parseObject reads the members of an object whose '{' was read.
func parseObject(dec *json.Decoder) (bool, error) {
	seen := map[string]bool{}
	var allowed, found bool
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false, fmt.Errorf("%w: %v", errBadAnswer, err)
		}
		k, _ := tok.(string)
		if seen[k] {
			return false, fmt.Errorf("%w: duplicate key %q", errBadAnswer, k)
		}
		seen[k] = true
		switch {
		case k == "allowed":
			v, err := dec.Token()
			b, ok := v.(bool)
			if err != nil || !ok {
				return false, fmt.Errorf("%w: \"allowed\" is not a boolean", errBadAnswer)
			}
			allowed, found = b, true
		case strings.EqualFold(k, "allowed"):
			return false, fmt.Errorf("%w: key %q is not \"allowed\"", errBadAnswer, k)
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return false, fmt.Errorf("%w: %v", errBadAnswer, err)
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return false, fmt.Errorf("%w: %v", errBadAnswer, err)
	}
	if !found {
		return false, fmt.Errorf("%w: no \"allowed\"", errBadAnswer)
	}
	return allowed, nil
}
