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
// The counters are per API server, and a control plane usually runs several
// behind one Service: successive reads land on different instances, each
// with its own cumulative counts, and the difference between two instances'
// counters means nothing. So every read is attributed to the instance that
// served it (its apiserver_id_hash label where the server exposes one, else
// its process_start_time_seconds), and the window keeps each instance's
// samples apart: the calls in the window are the sum, over instances, of
// what each counted between its own first and last sample inside the
// window. A count that no single API server observed inside the window can
// never enter it; an instance the scrapes did not reach twice in the window
// contributes nothing, so with several API servers the signal sees a share
// of the calls. A read that names no instance is refused (the signal is
// blind, and says so), and a counter that goes down within one instance
// starts that instance's samples over.
//
// The webhook is identified by its name and type (admit, validating), as
// the metrics label it: two configurations with a webhook of the same name
// are one series. And while a circuit is open with Bypass the API server
// does not call the webhook, so the signal has nothing to say about
// recovery: closing is the probes' decision.
package apisignal

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// WebhookID identifies a webhook in the API server's metrics: by name and
// type, whatever its configuration.
type WebhookID struct {
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

// Reading is one read of one API server's metrics.
type Reading struct {
	// Instance identifies the API server that served the read; empty when
	// the exposition names none.
	Instance string
	// Webhooks are the cumulative counts of every webhook it has called.
	Webhooks map[WebhookID]Counts
}

const (
	metricStartTime = "process_start_time_seconds"
	labelInstanceID = "apiserver_id_hash"
)

// Parse reads a /metrics exposition and returns each webhook's counts and
// the instance that counted them. Calls are at least the failures: a call
// that fails is counted whether or not the request counter saw it.
func Parse(r io.Reader) (Reading, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return Reading{}, fmt.Errorf("read metrics: %w", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		return Reading{}, fmt.Errorf("parse metrics: %w", err)
	}
	calls := map[WebhookID]float64{}
	failures := map[WebhookID]float64{}
	sum := func(name string, into map[WebhookID]float64, keep func(*dto.Metric) bool) {
		mf := families[name]
		if mf == nil {
			return
		}
		for _, m := range mf.GetMetric() {
			if keep != nil && !keep(m) {
				continue
			}
			w := WebhookID{Name: label(m, "name"), Type: label(m, "type")}
			into[w] += value(m)
		}
	}
	sum(metricRequests, calls, nil)
	sum(metricRejections, failures, func(m *dto.Metric) bool { return label(m, "error_type") == "calling_webhook_error" })
	sum(metricFailOpen, failures, nil)
	out := map[WebhookID]Counts{}
	for w, c := range calls {
		out[w] = Counts{Calls: c}
	}
	for w, f := range failures {
		c := out[w]
		c.Failures = f
		c.Calls = max(c.Calls, f)
		out[w] = c
	}
	return Reading{Instance: instance(families), Webhooks: out}, nil
}

// instance names the API server that served an exposition: the hash of its
// identity (the apiserver_id_hash label some of its metrics carry), else
// the start time of its process, which two API servers share only if they
// started within the same 10 ms.
func instance(families map[string]*dto.MetricFamily) string {
	names := make([]string, 0, len(families))
	for name := range families {
		names = append(names, name)
	}
	sort.Strings(names) // the same answer from the same exposition
	for _, name := range names {
		for _, m := range families[name].GetMetric() {
			if id := label(m, labelInstanceID); id != "" {
				return "id " + id
			}
		}
	}
	if mf := families[metricStartTime]; mf != nil && len(mf.GetMetric()) == 1 {
		return "started " + strconv.FormatFloat(value(mf.GetMetric()[0]), 'f', -1, 64)
	}
	return ""
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
