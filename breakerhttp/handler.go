package breakerhttp

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/tripswitch-dev/tripswitch/limit"
)

// LimitHandler returns a handler that runs h under l, for a server that
// sheds load instead of queueing it: a request beyond the limit is answered
// 503 Service Unavailable with Retry-After (retryAfter rounded up to whole
// seconds; 1 when it is not positive) at once, and h does not run. A
// request whose client leaves while it waits for a permit (a Bulkhead with
// MaxWaitDuration) is not answered. The permit is given back when h returns
// or panics; dropped, without teaching an adaptive limit a latency, when
// the client went away during h.
func LimitHandler(h http.Handler, l limit.Limiter, retryAfter time.Duration) http.Handler {
	secs := max(1, int64(retryAfter/time.Second))
	if retryAfter > time.Second && retryAfter%time.Second != 0 {
		secs++
	}
	value := strconv.FormatInt(secs, 10)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pm, err := l.Acquire(r.Context())
		if err != nil {
			if errors.Is(err, limit.ErrLimited) {
				w.Header().Set("Retry-After", value)
				http.Error(w, "server busy: concurrency limit reached", http.StatusServiceUnavailable)
			}
			return
		}
		defer pm.Release() // a no-op after End; h panicked otherwise
		h.ServeHTTP(w, r)
		pm.End(r.Context())
	})
}
