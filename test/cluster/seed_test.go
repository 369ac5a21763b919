package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/defaulthook"
)

// creates is how many ConfigMaps each measured phase creates, as in the seed.
const creates = 15

// phase is one row of the seed's table: ConfigMap creates as a client sees
// them through the API server.
type phase struct {
	name     string
	lat      []time.Duration
	admitted int
	mutated  int
}

func (p phase) p50() time.Duration {
	s := slices.Clone(p.lat)
	slices.Sort(s)
	return s[len(s)/2]
}

// testSeedExperiment is seed 000's experiment where users run it: a
// Service-backed mutating webhook (two replicas, a PDB, failurePolicy Fail,
// timeoutSeconds 1) made 2 s slow and healed, twice (Ignore, then Bypass),
// with ConfigMap creates timed in each phase. The table goes to the log (and
// to $TRIPSWITCH_CLUSTER_REPORT).
func testSeedExperiment(t *testing.T) {
	installTripswitch(t, nil)
	const target = "seed-target"
	hook := deployWebhook(t, "seed-webhook", "hook")
	ensureNamespace(t, target, "tripswitch.test/seed")
	hook.configuration(t, seedHook, "configmaps", "tripswitch.test/seed")
	before := snapshot(t, seedHook)
	b := breaker(t, seedHook, v1alpha1.OpenActionIgnore, v1alpha1.ProbeSpec{})
	waitState(t, b.Name, v1alpha1.StateClosed, time.Minute)

	healthy := createConfigMaps(t, target, "healthy", creates)
	if healthy.admitted != creates || healthy.mutated != creates {
		t.Errorf("healthy Fail: %d of %d admitted, %d mutated; want all admitted through the webhook", healthy.admitted, creates, healthy.mutated)
	}

	// Ignore: the fault, then creates until the controller rewrites the
	// configuration. A create that ended before the rewrite was seen was
	// reviewed under Fail and must be rejected at the webhook's timeout. One
	// still in flight then is neither: under Ignore it too waits the full
	// timeout, so it began after the rewrite only if it ends after it.
	fault := time.Now()
	rewritten := watchWebhooks(t, seedHook)
	opened := watchState(t, b.Name, v1alpha1.StateOpen)
	hook.setDelay(t, 2*time.Second)
	delayed := phase{name: "delayed Fail"}
	for i := 0; !rewritten.seen(); i++ {
		o := createConfigMap(t, target, fmt.Sprintf("delayed-%d", i))
		if !rewritten.seen() {
			delayed.add(o)
		}
		if time.Since(fault) > 2*time.Minute {
			t.Fatal("the configuration was not rewritten within 2 minutes of the fault")
		}
	}
	eventually(t, time.Minute, "breaker "+b.Name+" Open", func(context.Context) (bool, error) { return opened.seen(), nil })
	ignoreOpen := opened.at().Sub(fault)
	if len(delayed.lat) == 0 || delayed.admitted != 0 {
		t.Errorf("delayed Fail: %d of %d admitted before the configuration was rewritten, want at least one create, every one rejected at the webhook's timeout", delayed.admitted, len(delayed.lat))
	}
	admits(t, target, "admitted under Ignore", func(o outcome) bool { return o.admitted })
	openIgnore := createConfigMaps(t, target, "open-ignore", creates)
	if openIgnore.admitted != creates || openIgnore.mutated != 0 || openIgnore.p50() < time.Second {
		t.Errorf("open Ignore: %d admitted, %d mutated, p50 %v; want all admitted unmutated after waiting the 1 s timeout", openIgnore.admitted, openIgnore.mutated, openIgnore.p50())
	}
	healed := time.Now()
	hook.setDelay(t, 0)
	ignoreClose := waitState(t, b.Name, v1alpha1.StateClosed, 2*time.Minute).Sub(healed)

	// Bypass: the same fault; the API server skips the webhook while open.
	setOpenAction(t, b.Name, v1alpha1.OpenActionBypass)
	fault = time.Now()
	hook.setDelay(t, 2*time.Second)
	bypassOpen := waitState(t, b.Name, v1alpha1.StateOpen, 2*time.Minute).Sub(fault)
	admits(t, target, "admitted unmutated under Bypass", func(o outcome) bool { return o.admitted && !o.mutated })
	openBypass := createConfigMaps(t, target, "open-bypass", creates)
	if openBypass.admitted != creates || openBypass.mutated != 0 || openBypass.p50() >= time.Second {
		t.Errorf("open Bypass: %d admitted, %d mutated, p50 %v; want all admitted unmutated without waiting for the webhook", openBypass.admitted, openBypass.mutated, openBypass.p50())
	}
	healed = time.Now()
	hook.setDelay(t, 0)
	bypassClose := waitState(t, b.Name, v1alpha1.StateClosed, 2*time.Minute).Sub(healed)
	admits(t, target, "mutated again", func(o outcome) bool { return o.mutated })
	recovered := createConfigMaps(t, target, "recovered", creates)
	if recovered.admitted != creates || recovered.mutated != creates {
		t.Errorf("recovered: %d of %d admitted, %d mutated; want all admitted through the webhook", recovered.admitted, creates, recovered.mutated)
	}
	setOpenAction(t, b.Name, v1alpha1.OpenActionIgnore)
	if after := snapshot(t, seedHook); after != before {
		t.Errorf("the configuration is not what it was:\nbefore %s\nafter  %s", before, after)
	}

	report := seedReport([]phase{healthy, delayed, openIgnore, openBypass, recovered},
		map[string][2]time.Duration{"Ignore": {ignoreOpen, ignoreClose}, "Bypass": {bypassOpen, bypassClose}})
	t.Log("\n" + report)
	if path := os.Getenv("TRIPSWITCH_CLUSTER_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func seedReport(phases []phase, runs map[string][2]time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| phase | creates | admitted | mutated | p50 |\n| --- | ---: | ---: | ---: | ---: |\n")
	for _, p := range phases {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s |\n", p.name, len(p.lat), p.admitted, p.mutated, ms(p.p50()))
	}
	fmt.Fprintf(&b, "\n| run | fault → open | recovery → closed |\n| --- | ---: | ---: |\n")
	for _, name := range []string{"Ignore", "Bypass"} {
		fmt.Fprintf(&b, "| %s | %.2f s | %.2f s |\n", name, runs[name][0].Seconds(), runs[name][1].Seconds())
	}
	return b.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// outcome is one create as the client saw it.
type outcome struct {
	lat      time.Duration
	admitted bool
	mutated  bool
}

func (p *phase) add(o outcome) {
	p.lat = append(p.lat, o.lat)
	if o.admitted {
		p.admitted++
	}
	if o.mutated {
		p.mutated++
	}
}

func createConfigMaps(t testing.TB, ns, name string, n int) phase {
	p := phase{name: map[string]string{"healthy": "healthy Fail", "open-ignore": "open Ignore", "open-bypass": "open Bypass", "recovered": "recovered"}[name]}
	for i := range n {
		p.add(createConfigMap(t, ns, fmt.Sprintf("%s-%d", name, i)))
	}
	return p
}

// admits waits until a dry-run create is what a phase expects: the API
// server applies a configuration the controller wrote a moment after the
// write, and a breaker's status is written right after the configuration.
func admits(t testing.TB, ns, what string, want func(outcome) bool) {
	t.Helper()
	eventually(t, time.Minute, "a dry-run create "+what, func(ctx context.Context) (bool, error) {
		o, err := create(ctx, ns, "dry-run", metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return want(o), fmt.Errorf("admitted %t, mutated %t (%v)", o.admitted, o.mutated, err)
	})
}

// createConfigMap times one create through the API server.
func createConfigMap(t testing.TB, ns, name string) outcome {
	t.Helper()
	o, _ := create(t.Context(), ns, name, metav1.CreateOptions{})
	return o
}

// create makes one ConfigMap as opts say; mutated says whether it came
// back with the webhook's label.
func create(ctx context.Context, ns, name string, opts metav1.CreateOptions) (outcome, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	began := time.Now()
	got, err := env.cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, opts)
	o := outcome{lat: time.Since(began), admitted: err == nil}
	if err == nil {
		o.mutated = got.Labels[defaulthook.InjectedLabel] == "true"
	}
	return o, err
}

func setOpenAction(t testing.TB, name string, a v1alpha1.OpenAction) {
	t.Helper()
	b, err := state(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(b.DeepCopy())
	b.Spec.OpenAction = a
	if err := env.client.Patch(t.Context(), &b, patch); err != nil {
		t.Fatal(err)
	}
}

// stateWatch notes the first time a poller saw a breaker in a state.
type stateWatch struct {
	mu    sync.Mutex
	first time.Time
}

func (w *stateWatch) seen() bool { w.mu.Lock(); defer w.mu.Unlock(); return !w.first.IsZero() }
func (w *stateWatch) at() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

// watchWebhooks notes the first time a watch sees the configuration's
// webhooks differ from what they are when it starts.
func watchWebhooks(t testing.TB, name string) *stateWatch {
	t.Helper()
	w := &stateWatch{}
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := env.client.Get(t.Context(), client.ObjectKey{Name: name}, &cfg); err != nil {
		t.Fatal(err)
	}
	base, _ := json.Marshal(cfg.Webhooks)
	changed := func(c *admissionregistrationv1.MutatingWebhookConfiguration) bool {
		b, _ := json.Marshal(c.Webhooks)
		if bytes.Equal(b, base) {
			return false
		}
		w.mu.Lock()
		w.first = time.Now()
		w.mu.Unlock()
		return true
	}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	go func() {
		api := env.cs.AdmissionregistrationV1().MutatingWebhookConfigurations()
		// Each round reads the object, then watches from its version until
		// the watch ends (a timeout, an error such as 410 Gone).
		for ctx.Err() == nil {
			got, err := api.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if changed(got) {
				return
			}
			wi, err := api.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: got.ResourceVersion})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range wi.ResultChan() {
				if c, ok := ev.Object.(*admissionregistrationv1.MutatingWebhookConfiguration); ok && changed(c) {
					wi.Stop()
					return
				}
			}
			wi.Stop()
		}
	}()
	return w
}

// watchState polls the breaker every 100 ms in the background until it is
// in want (or the test ends).
func watchState(t testing.TB, name string, want v1alpha1.CircuitState) *stateWatch {
	w := &stateWatch{}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			if b, err := state(ctx, name); err == nil && b.Status.State == want {
				w.mu.Lock()
				w.first = time.Now()
				w.mu.Unlock()
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return w
}
