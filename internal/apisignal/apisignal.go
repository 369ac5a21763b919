// Package apisignal turns the API server's own metrics of its calls to a
// webhook into a health signal: over a sliding window, the share of calls
// that failed (the webhook could not be called or did not answer in time).
//
// The counters, from the API server's /metrics:
//
//	apiserver_admission_webhook_request_total{name,type,...}        every call, by HTTP code
//	apiserver_admission_webhook_rejection_count{name,type,error_type="calling_webhook_error",...}
//	                                                                 failed calls under failurePolicy Fail
//	apiserver_admission_webhook_fail_open_count{name,type}          failed calls under failurePolicy Ignore
//
// Each scrape's increments go into a TIME_BASED window of tripswitch's own
// breaker (METRICS_ONLY: it counts and never acts), which gives the failure
// rate once the window holds the minimum number of calls.
//
// Limits: the counters are per API server. In a control plane with several,
// each scrape reaches one of them; an increment is only taken between two
// scrapes that saw counters no smaller than before (a decrease is a reset or
// another API server, and that interval is skipped), so the signal sees a
// share of the calls and may mix API servers. The webhook is identified by
// its name and type (admit, validating), as the metrics label it: two
// configurations with a webhook of the same name are one series. And while
// a circuit is open with Bypass the API server does not call the webhook,
// so the signal has nothing to say about recovery: closing is the probes'
// decision.
package apisignal

import (
	"bytes"
	"fmt"
	"io"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Webhook identifies a webhook in the API server's metrics.
type Webhook struct {
	// Name is the webhook's name.
	Name string
	// Type is "admit" (mutating) or "validating".
	Type string
}

// Counts are a webhook's cumulative calls and failed calls.
type Counts struct {
	Calls, Failures float64
}

const (
	metricRequests   = "apiserver_admission_webhook_request_total"
	metricRejections = "apiserver_admission_webhook_rejection_count"
	metricFailOpen   = "apiserver_admission_webhook_fail_open_count"
)

// Parse reads a /metrics exposition and returns each webhook's counts.
// Calls are at least the failures: a call that fails is counted whether or
// not the request counter saw it.
func Parse(r io.Reader) (map[Webhook]Counts, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	calls := map[Webhook]float64{}
	failures := map[Webhook]float64{}
	sum := func(name string, into map[Webhook]float64, keep func(*dto.Metric) bool) {
		mf := families[name]
		if mf == nil {
			return
		}
		for _, m := range mf.GetMetric() {
			if keep != nil && !keep(m) {
				continue
			}
			w := Webhook{Name: label(m, "name"), Type: label(m, "type")}
			into[w] += value(m)
		}
	}
	sum(metricRequests, calls, nil)
	sum(metricRejections, failures, func(m *dto.Metric) bool { return label(m, "error_type") == "calling_webhook_error" })
	sum(metricFailOpen, failures, nil)
	out := map[Webhook]Counts{}
	for w, c := range calls {
		out[w] = Counts{Calls: c}
	}
	for w, f := range failures {
		c := out[w]
		c.Failures = f
		c.Calls = max(c.Calls, f)
		out[w] = c
	}
	return out, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}
