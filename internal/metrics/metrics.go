// Package metrics is the controller's Prometheus metrics: per breaker
// (state, transitions, time open, conflicts, probes, audits) and for the
// process (deferred status writes, discarded probes, stalls).
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/audit"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
	"github.com/tripswitch-dev/tripswitch/internal/stall"
)

// Metrics are the controller's Prometheus metrics, labelled by breaker name
// only: breaker names are chosen by operators, never taken from requests.
type Metrics struct {
	open        *prometheus.GaugeVec
	tooLong     *prometheus.GaugeVec
	refused     *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	openSeconds *prometheus.CounterVec
	conflicts   *prometheus.CounterVec
	probes      *prometheus.CounterVec
	probeTime   *prometheus.HistogramVec
	probeLag    *prometheus.GaugeVec
	audit       *prometheus.GaugeVec
	deferred    prometheus.Counter
	discarded   *prometheus.CounterVec
	trials      *prometheus.CounterVec
	exhausted   *prometheus.CounterVec

	// probeSeries caches each breaker's per-probe series (breaker name ->
	// *probeSeries): a thousand probes a second look none up by label.
	probeSeries sync.Map
}

// probeSeries are one breaker's series that every probe updates.
type probeSeries struct {
	results  map[probe.Status]prometheus.Counter
	duration prometheus.Observer
	lag      prometheus.Gauge
}

// New creates the metrics and registers them with reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := Unregistered()
	for _, c := range []prometheus.Collector{m.open, m.tooLong, m.refused, m.transitions, m.openSeconds, m.conflicts, m.probes, m.probeTime, m.probeLag, m.audit, m.deferred, m.discarded, m.trials, m.exhausted} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Unregistered creates the metrics without registering them anywhere:
// what a Reconciler given none records into.
func Unregistered() *Metrics {
	m := &Metrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tripswitch_circuit_open", Help: "1 while tripswitch holds the breaker's webhook open, else 0.",
		}, []string{"breaker"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tripswitch_circuit_transitions_total", Help: "Writes to webhook configurations, by kind of write (Open, Close, Drop) and reason.",
		}, []string{"breaker", "write", "reason"}),
		tooLong: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tripswitch_circuit_open_too_long", Help: "1 while the breaker's circuit has been open for its spec.maxOpenDuration (condition OpenTooLong), else 0.",
		}, []string{"breaker"}),
		refused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tripswitch_circuit_open_refused", Help: "1 while --max-open-circuits keeps the breaker's circuit from opening (condition OpenRefused, reason ClusterLimit), else 0.",
		}, []string{"breaker"}),
		openSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tripswitch_circuit_open_seconds_total", Help: "Seconds the breaker's webhook spent open, counted when it closes.",
		}, []string{"breaker"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tripswitch_patch_conflicts_total", Help: "Patches rejected because the webhook configuration changed since it was read.",
		}, []string{"breaker"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tripswitch_probe_results_total", Help: "Probe results by status (Healthy, Unhealthy, Unknown, Discarded).",
		}, []string{"breaker", "result"}),
		probeTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tripswitch_probe_duration_seconds", Help: "Probe latency.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"breaker"}),
		probeLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tripswitch_probe_lag_seconds", Help: "How much later than its interval the breaker's last probe started: above half the interval, the controller cannot probe its breakers on time (the ProbesLate condition).",
		}, []string{"breaker"}),
		audit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tripswitch_audit_objects", Help: "Objects admitted during the breaker's last audited open window, by the recovered webhook's verdict (Objected, WouldMutate, NoObjection, NotChecked, NotReviewed).",
		}, []string{"breaker", "verdict"}),
		discarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tripswitch_probes_discarded_total", Help: "Probes counted as no evidence, by why: Starved (timed out while the controller could not run), Blocked (never reached the webhook: its connections were held by unanswered requests), Paced (waited for the controller's own limit on handshakes at once).",
		}, []string{"reason"}),
		trials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tripswitch_trials_total", Help: "Half-open trials (spec.halfOpen), by outcome: started, passed, failed, no_traffic (closed on the probes after maxWait without enough calls to judge).",
		}, []string{"breaker", "outcome"}),
		exhausted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tripswitch_write_budget_exhausted_total", Help: "Writes to the breaker's webhook configuration refused because its outage window's write budget did not allow them (the breaker disarms, Ready reason WriteBudgetExhausted).",
		}, []string{"breaker"}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tripswitch_status_writes_deferred_total", Help: "Breaker status writes deferred because breakers were queued for decisions (opening or closing circuits first during a storm).",
		}),
	}
	for _, d := range []probe.Discard{probe.DiscardStarved, probe.DiscardBlocked, probe.DiscardPaced} {
		m.discarded.WithLabelValues(string(d))
	}
	return m
}

// BudgetExhausted counts a write refused past the breaker's write budget.
func (m *Metrics) BudgetExhausted(breaker string) {
	if m == nil {
		return
	}
	m.exhausted.WithLabelValues(breaker).Inc()
}

// ObserveProbe records one probe result.
func (m *Metrics) ObserveProbe(breaker string, r probe.Result) {
	if m == nil {
		return
	}
	v, ok := m.probeSeries.Load(breaker)
	if !ok {
		ps := &probeSeries{results: map[probe.Status]prometheus.Counter{}, duration: m.probeTime.WithLabelValues(breaker), lag: m.probeLag.WithLabelValues(breaker)}
		for _, st := range []probe.Status{probe.Healthy, probe.Unhealthy, probe.Unknown, probe.Discarded} {
			ps.results[st] = m.probes.WithLabelValues(breaker, string(st))
		}
		v, _ = m.probeSeries.LoadOrStore(breaker, ps)
	}
	ps := v.(*probeSeries)
	if c, ok := ps.results[r.Status]; ok {
		c.Inc()
	} else {
		m.probes.WithLabelValues(breaker, string(r.Status)).Inc()
	}
	ps.duration.Observe(r.Latency.Seconds())
	ps.lag.Set(r.Lag.Seconds())
	if r.Discard != "" {
		m.discarded.WithLabelValues(string(r.Discard)).Inc()
	}
}

// RegisterStalls exports how long the process could not run, as its
// heartbeat measured it, and its cgroup's CPU throttling where readable.
func RegisterStalls(reg prometheus.Registerer, w *stall.Watch) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tripswitch_controller_stalled_seconds_total",
			Help: "Seconds the controller could not run (paused, CPU-throttled, waiting for a CPU), as its heartbeat measured them; probe timeouts in such a stall are discarded.",
		}, func() float64 { return w.Total().Seconds() }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tripswitch_controller_cpu_throttled_seconds_total",
			Help: "Seconds the controller's cgroup was throttled by its CPU limit (cpu.stat; 0 where it is not readable).",
		}, func() float64 { t, _ := w.Throttling(); return t.Time.Seconds() }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// SetOpen publishes whether tripswitch holds breaker's webhook open.
func (m *Metrics) SetOpen(breaker string, open bool) {
	if m == nil {
		return
	}
	v := 0.0
	if open {
		v = 1
	}
	m.open.WithLabelValues(breaker).Set(v)
	m.initialise(breaker)
}

// SetStatus publishes what breaker's status says: whether tripswitch holds
// its webhook open (SetOpen) and whether it has been open too long
// (OpenTooLong, spec.maxOpenDuration), and whether the cluster limit
// keeps it from opening (OpenRefused).
func (m *Metrics) SetStatus(breaker string, s v1alpha1.WebhookCircuitBreakerStatus) {
	if m == nil {
		return
	}
	m.SetOpen(breaker, s.State == v1alpha1.StateOpen)
	v := 0.0
	if meta.IsStatusConditionTrue(s.Conditions, v1alpha1.ConditionOpenTooLong) {
		v = 1
	}
	m.tooLong.WithLabelValues(breaker).Set(v)
	v = 0
	if meta.IsStatusConditionTrue(s.Conditions, v1alpha1.ConditionOpenRefused) {
		v = 1
	}
	m.refused.WithLabelValues(breaker).Set(v)
}

// initialise creates, at zero, the counter series that the shipped alerts
// and dashboard read, so that a breaker's first opening, external change or
// failed probe is an increase from 0 rather than a series that appears at 1
// (which increase() and rate() cannot see).
func (m *Metrics) initialise(breaker string) {
	for _, wr := range [][2]string{
		{string(policy.WriteOpen), policy.ReasonWebhookUnhealthy}, {string(policy.WriteOpen), policy.ReasonAPIServerFailing},
		{string(policy.WriteClose), policy.ReasonWebhookRecovered}, {string(policy.WriteDrop), policy.ReasonExternalChange},
	} {
		m.transitions.WithLabelValues(breaker, wr[0], wr[1])
	}
	for _, s := range []probe.Status{probe.Healthy, probe.Unhealthy, probe.Unknown, probe.Discarded} {
		m.probes.WithLabelValues(breaker, string(s))
	}
	m.openSeconds.WithLabelValues(breaker)
	m.conflicts.WithLabelValues(breaker)
}

// Transition counts a write to breaker's webhook, and the time it was
// open when the write ends an open window.
func (m *Metrics) Transition(breaker string, w policy.Write, reason string, openFor time.Duration) {
	if m == nil {
		return
	}
	m.transitions.WithLabelValues(breaker, string(w), reason).Inc()
	if openFor > 0 {
		m.openSeconds.WithLabelValues(breaker).Add(openFor.Seconds())
	}
}

// Trial counts one half-open trial's outcome.
func (m *Metrics) Trial(breaker, outcome string) {
	if m != nil {
		m.trials.WithLabelValues(breaker, outcome).Inc()
	}
}

// SetAudit publishes the last audit's counts, every verdict included.
func (m *Metrics) SetAudit(breaker string, counts map[audit.Verdict]int) {
	if m == nil {
		return
	}
	for _, v := range []audit.Verdict{audit.Objected, audit.WouldMutate, audit.NoObjection, audit.NotChecked, audit.NotReviewed} {
		m.audit.WithLabelValues(breaker, string(v)).Set(float64(counts[v]))
	}
}

// DeferredReport counts a status write deferred behind decisions.
func (m *Metrics) DeferredReport() {
	if m != nil {
		m.deferred.Inc()
	}
}

// Conflict counts a patch refused as stale.
func (m *Metrics) Conflict(breaker string) {
	if m != nil {
		m.conflicts.WithLabelValues(breaker).Inc()
	}
}

// Forget drops a deleted breaker's series.
func (m *Metrics) Forget(breaker string) {
	if m == nil {
		return
	}
	m.probeSeries.Delete(breaker)
	labels := prometheus.Labels{"breaker": breaker}
	m.open.DeletePartialMatch(labels)
	m.tooLong.DeletePartialMatch(labels)
	m.refused.DeletePartialMatch(labels)
	m.transitions.DeletePartialMatch(labels)
	m.openSeconds.DeletePartialMatch(labels)
	m.conflicts.DeletePartialMatch(labels)
	m.probes.DeletePartialMatch(labels)
	m.probeTime.DeletePartialMatch(labels)
	m.probeLag.DeletePartialMatch(labels)
	m.audit.DeletePartialMatch(labels)
	m.trials.DeletePartialMatch(labels)
	m.exhausted.DeletePartialMatch(labels)
}

// Knows reports whether m caches per-probe series of breaker.
func (m *Metrics) Knows(breaker string) bool {
	if m == nil {
		return false
	}
	_, ok := m.probeSeries.Load(breaker)
	return ok
}
