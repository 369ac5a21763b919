package accessgate

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
)

// Subject extracts the authenticated subject from a request; false means
// the request is not authenticated.
type Subject func(r *http.Request) (string, bool)

// Answer codes in the JSON bodies the middleware writes. Users and
// operators must be able to tell "no permission" from "cannot check now".
const (
	CodeDenied          = "SERVICE_ACCESS_DENIED"
	CodeUnavailable     = "SERVICE_ACCESS_UNAVAILABLE"
	CodeUnauthenticated = "UNAUTHENTICATED"
	CodeInternal        = "INTERNAL_ERROR"
)

// Middleware guards next with the gate for one resource. next runs only on
// an allow. A denial answers 403 SERVICE_ACCESS_DENIED; an unknown decision
// answers 503 SERVICE_ACCESS_UNAVAILABLE with Retry-After; a request
// without a subject, or whose subject is empty, answers 401; an empty
// resource (a programming error) answers 500 INTERNAL_ERROR, and is logged
// once, when the middleware is made.
func (g *Checker) Middleware(resource string, subject Subject) func(http.Handler) http.Handler {
	if resource == "" {
		// Once, where the mistake is made, not once per refused request.
		g.cfg.Logger.Error("accessgate: Middleware guards an empty resource; every request is refused", "gate", g.cfg.Name)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s, ok := subject(r)
			if !ok {
				s = "" // not authenticated, whatever it returned
			}
			err := g.Check(r.Context(), s, resource)
			var ue *UnavailableError
			switch {
			case err == nil:
				next.ServeHTTP(w, r)
			case errors.Is(err, ErrUnauthenticated):
				writeJSON(w, http.StatusUnauthorized, CodeUnauthenticated, "authentication required")
			case errors.Is(err, ErrNoResource):
				writeJSON(w, http.StatusInternalServerError, CodeInternal, "access cannot be checked")
			case errors.Is(err, ErrDenied):
				writeJSON(w, http.StatusForbidden, CodeDenied, "you do not have access to "+resource)
			case errors.As(err, &ue):
				secs := int(math.Ceil(ue.RetryAfter.Seconds()))
				w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
				writeJSON(w, http.StatusServiceUnavailable, CodeUnavailable, "access to "+resource+" cannot be checked right now; retry later")
			default:
				writeJSON(w, http.StatusServiceUnavailable, CodeUnavailable, "access to "+resource+" cannot be checked right now")
			}
		})
	}
}

func writeJSON(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code, msg})
}
