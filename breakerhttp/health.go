package breakerhttp

import (
	"encoding/json"
	"net/http"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// HealthHandler serves the registry's circuits as information, always with
// status 200 and "status": "UP". An open circuit means a dependency is
// sick, not this process: failing liveness would restart the caller, wipe
// its failure statistics and flood the dependency again on start, and
// failing readiness would take healthy instances out of traffic. The
// circuit closes by itself through HALF_OPEN trial calls.
func HealthHandler(r *breaker.Registry) http.Handler {
	type circuit struct {
		State         string  `json:"state"`
		FailureRate   float64 `json:"failureRate"`
		SlowCallRate  float64 `json:"slowCallRate"`
		BufferedCalls int64   `json:"bufferedCalls"`
		FailedCalls   int64   `json:"failedCalls"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		out := struct {
			Status   string             `json:"status"`
			Circuits map[string]circuit `json:"circuits"`
		}{Status: "UP", Circuits: map[string]circuit{}}
		for _, b := range r.All() {
			m := b.Metrics()
			out.Circuits[b.Name()] = circuit{State: m.State.String(), FailureRate: m.FailureRate, SlowCallRate: m.SlowCallRate, BufferedCalls: m.Calls, FailedCalls: m.FailedCalls}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(out)
	})
}
