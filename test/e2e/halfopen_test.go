package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// realCallsHook answers the probes' GET /healthz (or /quiet-healthz) as
// healthy or not, and the API server's reviews on /validate as it is told:
// failing (500) or allowing. It counts the reviews it gets.
type realCallsHook struct {
	url              string
	caPEM            []byte
	failCalls        atomic.Bool
	failQuietProbes  atomic.Bool
	calls, callsFail atomic.Int64
	mu               sync.Mutex
	callTimes        []time.Time
}

// callsBetween counts the reviews the hook got in [from, to].
func (h *realCallsHook) callsBetween(from, to time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, at := range h.callTimes {
		if !at.Before(from) && !at.After(to) {
			n++
		}
	}
	return n
}

func startRealCallsHook(t *testing.T) *realCallsHook {
	t.Helper()
	h := &realCallsHook{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /quiet-healthz", func(w http.ResponseWriter, _ *http.Request) {
		if h.failQuietProbes.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("POST /validate", func(w http.ResponseWriter, r *http.Request) {
		h.calls.Add(1)
		h.mu.Lock()
		h.callTimes = append(h.callTimes, time.Now())
		h.mu.Unlock()
		if h.failCalls.Load() {
			h.callsFail.Add(1)
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(&review)
	})
	h.url, h.caPEM = serveTLS(t, "halfopen-hook", mux)
	return h
}

func (h *realCallsHook) configuration(name, webhook string, label map[string]string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"team": "platform"}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:          webhook,
			ClientConfig:  admissionregistrationv1.WebhookClientConfig{URL: ptr.To(h.url + "/validate"), CABundle: h.caPEM},
			FailurePolicy: ptr.To(admissionregistrationv1.Fail), TimeoutSeconds: ptr.To(int32(1)),
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: label},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

// install creates the hook's configuration, returns it as created, and
// watches every version of it from then on.
func (h *realCallsHook) install(t *testing.T, env *testenv.Env, name, webhook string, label map[string]string) (*admissionregistrationv1.ValidatingWebhookConfiguration, *versions) {
	t.Helper()
	cfg := h.configuration(name, webhook, label)
	if err := env.Client.Create(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.DeepCopy(), watchVersions(t, t.Context(), cs, name, cfg.DeepCopy())
}

func trialBreaker(name, webhook, healthPath string, h v1alpha1.HalfOpenSpec) *v1alpha1.WebhookCircuitBreaker {
	return &v1alpha1.WebhookCircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.WebhookCircuitBreakerSpec{
			Target:                          v1alpha1.Target{Kind: v1alpha1.ValidatingWebhookConfiguration, ConfigurationName: name, WebhookName: webhook},
			AllowAdmissionWithoutValidation: true,
			OpenAction:                      v1alpha1.OpenActionBypass,
			Probe:                           v1alpha1.ProbeSpec{Interval: &metav1.Duration{Duration: 500 * time.Millisecond}, HealthPath: healthPath},
			APIServerSignal: &v1alpha1.APIServerSignalSpec{Enabled: true, Window: &metav1.Duration{Duration: 10 * time.Second},
				MinimumCalls: 5, FailureRateThreshold: 50},
			HalfOpen: &h,
		},
	}
}

// phase is what one watched version of the configuration says about the
// webhook: closed (the original), open (Bypass, "false"), or in a trial.
type phase struct {
	name         string // closed, open, trial
	failedTrials int32
	at           time.Time // when the watch delivered it
}

// versions records every version of a configuration the API server shows a
// watch, and checks each is the original, the original plus tripswitch's
// open change, or plus its trial, with a record that says exactly that.
type versions struct {
	mu     sync.Mutex
	seen   []phase
	broken []string
}

func watchVersions(t *testing.T, ctx context.Context, cs *kubernetes.Clientset, name string, original *admissionregistrationv1.ValidatingWebhookConfiguration) *versions {
	t.Helper()
	w, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	v := &versions{}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			cfg, ok := ev.Object.(*admissionregistrationv1.ValidatingWebhookConfiguration)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			p, problem := classify(cfg, original)
			v.mu.Lock()
			if problem != "" {
				v.broken = append(v.broken, fmt.Sprintf("version %s: %s", cfg.ResourceVersion, problem))
			} else if n := len(v.seen); n == 0 || v.seen[n-1].name != p.name || v.seen[n-1].failedTrials != p.failedTrials {
				p.at = time.Now()
				v.seen = append(v.seen, p)
			}
			v.mu.Unlock()
		}
	}()
	return v
}

func classify(cfg, original *admissionregistrationv1.ValidatingWebhookConfiguration) (phase, string) {
	view, err := circuit.View(cfg)
	if err != nil {
		return phase{}, err.Error()
	}
	w, o := cfg.Webhooks[0], original.Webhooks[0]
	st := circuit.Inspect(view, w.Name)
	if st.RecordErr != nil {
		return phase{}, st.RecordErr.Error()
	}
	rest := w.DeepCopy()
	rest.FailurePolicy, rest.MatchConditions = o.FailurePolicy, o.MatchConditions
	if b, _ := json.Marshal(rest); string(b) != mustJSON(o) {
		return phase{}, "a field tripswitch does not own changed"
	}
	if st.Record == nil {
		if mustJSON(w) != mustJSON(o) || cfg.Annotations["team"] != "platform" || len(cfg.Annotations) != 1 {
			return phase{}, "no record, but not the original"
		}
		return phase{name: "closed"}, ""
	}
	if !st.Intact() || len(w.MatchConditions) != 1 {
		return phase{}, fmt.Sprintf("a record that does not describe the webhook: %+v on %+v", st.Record, w)
	}
	if st.InTrial() {
		return phase{name: "trial", failedTrials: st.Record.FailedTrials}, ""
	}
	if *w.FailurePolicy != admissionregistrationv1.Fail {
		return phase{}, "open with full Bypass but failurePolicy " + string(*w.FailurePolicy)
	}
	return phase{name: "open", failedTrials: st.Record.FailedTrials}, ""
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func (v *versions) check(t *testing.T) []phase {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, b := range v.broken {
		t.Error(b)
	}
	return append([]phase(nil), v.seen...)
}

// kubeconfigVia writes a copy of the kubeconfig at path whose server is addr.
func kubeconfigVia(t *testing.T, path, addr string) string {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kc.Clusters {
		c.Server = "https://" + addr
	}
	out := t.TempDir() + "/kubeconfig-via"
	if err := clientcmd.WriteToFile(*kc, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBypassTrialJudgedOnRealCalls is the case a health endpoint cannot
// see: the webhook's /healthz passes while every real review fails, for
// 45 s, on a control plane of two API servers behind a proxy (the signal's
// scrapes land on either). With Bypass and the API server signal, the
// circuit opens on the API server's counts and then must stay open or in a
// trial the whole time — every trial's real calls fail and send it back to
// full Bypass in one write, the next trial waiting longer — with no create
// rejected after the first open (a trial call that fails admits, under
// Ignore). Once real calls work, the next trial passes and the circuit
// closes, the configuration byte-identical to before.
func TestBypassTrialJudgedOnRealCalls(t *testing.T) {
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	second := env.SecondAPIServer(t)
	first := strings.TrimSuffix(strings.TrimPrefix(env.Config.Host, "https://"), "/")
	lb := testenv.StartBalancer(t, 3*time.Second, first, second)
	ctx := t.Context()
	h := startRealCallsHook(t)
	const name, webhook = "trial-real-calls", "trial.halfopen.tripswitch.e2e"
	label := map[string]string{"tripswitch.e2e/trial": "real-calls"}
	original, seen := h.install(t, env, name, webhook, label)
	spec := v1alpha1.HalfOpenSpec{After: &metav1.Duration{Duration: 3 * time.Second}, Window: &metav1.Duration{Duration: 10 * time.Second},
		SamplePercent: 50, MaxWait: &metav1.Duration{Duration: 30 * time.Second}, MaxBackoff: &metav1.Duration{Duration: 8 * time.Second}}
	if err := env.Client.Create(ctx, trialBreaker(name, webhook, "/healthz", spec)); err != nil {
		t.Fatal(err)
	}
	h.failCalls.Store(true)
	startController(t, kubeconfigVia(t, adminKubeconfig(t, env), lb.Addr), "trial", "--leader-elect=false", "--apiserver-signal-interval=1s")

	// Real traffic, 10 creates a second, each through either API server.
	var openedAt atomic.Pointer[time.Time]
	var rejectedAfterOpen atomic.Int64
	var lastRejection atomic.Value
	traffic, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for i := 0; traffic.Err() == nil; i++ {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("trial-%d", i), Labels: label}}
			err := env.Client.Create(traffic, cm)
			if err != nil && traffic.Err() == nil && openedAt.Load() != nil {
				rejectedAfterOpen.Add(1)
				lastRejection.Store(err.Error())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	get := func(ctx context.Context) (*v1alpha1.WebhookCircuitBreaker, error) {
		var wcb v1alpha1.WebhookCircuitBreaker
		return &wcb, env.Client.Get(ctx, client.ObjectKey{Name: name}, &wcb)
	}
	eventually(t, 60*time.Second, "the circuit to open on the API server's counts", func(ctx context.Context) (bool, error) {
		wcb, err := get(ctx)
		if err != nil || wcb.Status.State != v1alpha1.StateOpen {
			return false, fmt.Errorf("state %s (%v)", wcb.Status.State, err)
		}
		now := time.Now()
		openedAt.Store(&now)
		return true, nil
	})
	// Rejections already in flight when it opened are not the trial's.
	time.Sleep(2 * time.Second)
	rejectedAfterOpen.Store(0)

	// 45 s of failing real calls: open or in a trial, never closed.
	until := time.Now().Add(45 * time.Second)
	for time.Now().Before(until) {
		wcb, err := get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if wcb.Status.State != v1alpha1.StateOpen {
			t.Fatalf("state %s while every real call fails (history %+v)", wcb.Status.State, wcb.Status.History)
		}
		time.Sleep(250 * time.Millisecond)
	}
	wcb, _ := get(ctx)
	phases := seen.check(t)
	trials, failed := 0, int32(0)
	for i, p := range phases {
		if p.name == "trial" {
			trials++
			// A failed trial is one write back to full Bypass, counted.
			if i+1 < len(phases) && (phases[i+1].name != "open" || phases[i+1].failedTrials != p.failedTrials+1) {
				t.Errorf("after trial %d the next version is %+v, want open with %d failed trials", trials, phases[i+1], p.failedTrials+1)
			}
		}
		if p.name == "open" {
			failed = p.failedTrials
		}
	}
	var names []string
	for _, p := range phases {
		names = append(names, fmt.Sprintf("%s(%d)", p.name, p.failedTrials))
	}
	t.Logf("45 s of failing real calls: %d trial(s), %d failed, phases %v, webhook called %d times (%d failed); status.trial %+v",
		trials, failed, names, h.calls.Load(), h.callsFail.Load(), wcb.Status.Trial)
	// With after 3 s, a window of 10 s and backoff 3, 6, 8, 8 s: at least two
	// failed trials in 45 s.
	if failed < 2 {
		t.Errorf("%d failed trials in 45 s of failing real calls, want at least 2", failed)
	}
	checkTrialsJudgedOnTheirOwnCalls(t, env, h, name, phases, spec.After.Duration, 5)
	if n := rejectedAfterOpen.Load(); n != 0 {
		t.Errorf("%d creates rejected after the circuit opened (last: %v)", n, lastRejection.Load())
	}

	// Real calls recover: the next trial passes and the circuit closes within
	// the longest backoff + the trial's window + a few signal reads.
	h.failCalls.Store(false)
	recovered := time.Now()
	eventually(t, 8*time.Second+10*time.Second+15*time.Second, "the circuit to close after real calls recover", func(ctx context.Context) (bool, error) {
		wcb, err := get(ctx)
		if err != nil || wcb.Status.State != v1alpha1.StateClosed {
			return false, fmt.Errorf("state %s, trial %+v (%v)", wcb.Status.State, wcb.Status.Trial, err)
		}
		return true, nil
	})
	t.Logf("closed %s after real calls recovered", time.Since(recovered).Round(100*time.Millisecond))
	stop()
	wcb, _ = get(ctx)
	if n := len(wcb.Status.History); n == 0 || !strings.Contains(wcb.Status.History[n-1].CloseReason, "TrialPassed") {
		t.Errorf("the window's close reason is not the passed trial: %+v", wcb.Status.History)
	}
	var now admissionregistrationv1.ValidatingWebhookConfiguration
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &now); err != nil {
		t.Fatal(err)
	}
	if mustJSON(now.Webhooks) != mustJSON(original.Webhooks) || mustJSON(now.Annotations) != mustJSON(original.Annotations) {
		t.Errorf("after the close the configuration is not its original:\n%s\n%v", mustJSON(now.Webhooks), now.Annotations)
	}
	seen.check(t)
}

// checkTrialsJudgedOnTheirOwnCalls: the first trial waited halfOpen.after
// from the open (less the second the record's times are rounded to), every
// failed trial got at least minimumCalls reviews of its own between its start
// and its end, and no TrialFailed event counts more calls than the webhook
// got in its trial. The defect it guards: a circuit the signal opened while
// the probes passed started a trial at once, and the trial failed within
// 0.1 s on the calls that had opened it.
func checkTrialsJudgedOnTheirOwnCalls(t *testing.T, env *testenv.Env, h *realCallsHook, name string, phases []phase, after time.Duration, minimumCalls int) {
	t.Helper()
	type trial struct{ from, to time.Time }
	var failedTrials []trial
	for i, p := range phases {
		switch {
		case p.name == "trial" && i > 0 && phases[i-1].name == "open" && phases[i-1].failedTrials == 0 && p.failedTrials == 0:
			if waited := p.at.Sub(phases[i-1].at); waited < after-time.Second {
				t.Errorf("the first trial started %s after the open, want at least halfOpen.after (%s)", waited.Round(10*time.Millisecond), after)
			}
		case p.name == "open" && i > 0 && phases[i-1].name == "trial":
			failedTrials = append(failedTrials, trial{phases[i-1].at, p.at})
		}
	}
	for i, tr := range failedTrials {
		got := h.callsBetween(tr.from, tr.to)
		t.Logf("failed trial %d: %s long, %d reviews of its own", i+1, tr.to.Sub(tr.from).Round(10*time.Millisecond), got)
		if got < minimumCalls {
			t.Errorf("failed trial %d (%s long) got %d reviews of its own, fewer than minimumCalls %d: it was judged on calls made before it",
				i+1, tr.to.Sub(tr.from).Round(10*time.Millisecond), got, minimumCalls)
		}
	}
	var events eventsv1.EventList
	if err := env.Client.List(t.Context(), &events); err != nil {
		t.Fatal(err)
	}
	sort.Slice(events.Items, func(i, j int) bool { return events.Items[i].EventTime.Before(&events.Items[j].EventTime) })
	counted := regexp.MustCompile(`(\d+) trial call\(s\), (\d+) failed`)
	n := 0
	for _, ev := range events.Items {
		if ev.Regarding.Name != name || ev.Reason != "TrialFailed" {
			continue
		}
		m := counted.FindStringSubmatch(ev.Note)
		if m == nil {
			continue // a probe failure ends a trial whatever its calls
		}
		t.Logf("TrialFailed: %s", ev.Note)
		calls, _ := strconv.Atoi(m[1])
		if n < len(failedTrials) {
			tr := failedTrials[n]
			if got := h.callsBetween(tr.from.Add(-300*time.Millisecond), tr.to); calls > got {
				t.Errorf("TrialFailed says %d trial call(s), but the webhook got %d in that trial: %s", calls, got, ev.Note)
			}
		}
		n++
	}
	if n == 0 {
		t.Error("no TrialFailed event names the trial's calls")
	}
}

// TestTrialWithoutTrafficClosesOnTheProbes: the probes failed, the circuit
// opened with Bypass, the probes recovered, and nothing creates what the
// webhook validates. The trial sees no calls; it must not hang open: after
// halfOpen.maxWait it closes on the healthy probes, and says why.
func TestTrialWithoutTrafficClosesOnTheProbes(t *testing.T) {
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx := t.Context()
	h := startRealCallsHook(t)
	const name, webhook = "trial-quiet", "quiet.halfopen.tripswitch.e2e"
	original, _ := h.install(t, env, name, webhook, map[string]string{"tripswitch.e2e/trial": "never"})
	h.failQuietProbes.Store(true)
	spec := v1alpha1.HalfOpenSpec{After: &metav1.Duration{Duration: 2 * time.Second}, Window: &metav1.Duration{Duration: 10 * time.Second},
		MaxWait: &metav1.Duration{Duration: 15 * time.Second}}
	if err := env.Client.Create(ctx, trialBreaker(name, webhook, "/quiet-healthz", spec)); err != nil {
		t.Fatal(err)
	}
	startController(t, adminKubeconfig(t, env), "quiet", "--leader-elect=false", "--apiserver-signal-interval=1s")
	get := func(ctx context.Context) (*v1alpha1.WebhookCircuitBreaker, error) {
		var wcb v1alpha1.WebhookCircuitBreaker
		return &wcb, env.Client.Get(ctx, client.ObjectKey{Name: name}, &wcb)
	}
	eventually(t, 30*time.Second, "the circuit to open on the probes", func(ctx context.Context) (bool, error) {
		wcb, err := get(ctx)
		return err == nil && wcb.Status.State == v1alpha1.StateOpen, err
	})
	h.failQuietProbes.Store(false)
	var trialSeen atomic.Bool
	eventually(t, 40*time.Second, "the trial to start, see no calls, and close on the probes", func(ctx context.Context) (bool, error) {
		wcb, err := get(ctx)
		if err != nil {
			return false, err
		}
		if tr := wcb.Status.Trial; tr != nil && tr.Phase == "Running" {
			trialSeen.Store(true)
		}
		return wcb.Status.State == v1alpha1.StateClosed, fmt.Errorf("state %s, trial %+v", wcb.Status.State, wcb.Status.Trial)
	})
	wcb, _ := get(ctx)
	if n := len(wcb.Status.History); n == 0 || !strings.Contains(wcb.Status.History[n-1].CloseReason, "TrialNoTraffic") {
		t.Errorf("close reason %+v, want TrialNoTraffic", wcb.Status.History)
	}
	if !trialSeen.Load() {
		t.Error("status.trial never showed the running trial")
	}
	if h.calls.Load() != 0 {
		t.Errorf("the webhook got %d reviews with no traffic", h.calls.Load())
	}
	var now admissionregistrationv1.ValidatingWebhookConfiguration
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &now); err != nil {
		t.Fatal(err)
	}
	if mustJSON(now.Webhooks) != mustJSON(original.Webhooks) || mustJSON(now.Annotations) != mustJSON(original.Annotations) {
		t.Errorf("after the close the configuration is not its original")
	}
}

// last is the latest phase the watch saw.
func (v *versions) last() phase {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.seen) == 0 {
		return phase{}
	}
	return v.seen[len(v.seen)-1]
}

// TestKillNineThroughATrial: ten outages, each through open → a failed
// trial → full Bypass → a passing trial → closed, with the controller
// killed by SIGKILL at a random moment after each of those writes (before
// it reports, or while it decides the next). Every version of the
// configuration the API server shows is the original, or the original plus
// exactly tripswitch's open or trial change with a record that says so;
// every cycle converges to closed, and the configuration ends
// byte-identical. The seed is logged (TRIPSWITCH_E2E_SEED replays it).
func TestKillNineThroughATrial(t *testing.T) {
	rng := seeded(t)
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx := t.Context()
	h := startRealCallsHook(t)
	const name, webhook = "trial-kill", "kill.halfopen.tripswitch.e2e"
	label := map[string]string{"tripswitch.e2e/trial": "kill"}
	original, seen := h.install(t, env, name, webhook, label)
	spec := v1alpha1.HalfOpenSpec{After: &metav1.Duration{Duration: 2 * time.Second}, Window: &metav1.Duration{Duration: 10 * time.Second},
		SamplePercent: 100, MaxWait: &metav1.Duration{Duration: 30 * time.Second}, MaxBackoff: &metav1.Duration{Duration: 2 * time.Second}}
	if err := env.Client.Create(ctx, trialBreaker(name, webhook, "/healthz", spec)); err != nil {
		t.Fatal(err)
	}
	kubeconfig := adminKubeconfig(t, env)
	flags := []string{"--leader-elect=false", "--apiserver-signal-interval=1s"}
	p := startController(t, kubeconfig, "initial", flags...)
	traffic, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for i := 0; traffic.Err() == nil; i++ {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("kill-%d", i), Labels: label}}
			_ = env.Client.Create(traffic, cm)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	restarts := 0
	killAfter := func(cycle int, what string, want func(phase) bool) {
		t.Helper()
		eventually(t, 60*time.Second, fmt.Sprintf("cycle %d: %s", cycle, what), func(context.Context) (bool, error) {
			got := seen.last()
			return want(got), fmt.Errorf("last phase %+v", got)
		})
		time.Sleep(time.Duration(rng.Int64N(int64(700 * time.Millisecond))))
		p.kill()
		restarts++
		p = startController(t, kubeconfig, fmt.Sprintf("restart-%d", restarts), flags...)
	}
	for cycle := range 10 {
		start := time.Now()
		h.failCalls.Store(true)
		killAfter(cycle, "open", func(p phase) bool { return p.name == "open" && p.failedTrials == 0 })
		killAfter(cycle, "a trial", func(p phase) bool { return p.name == "trial" && p.failedTrials == 0 })
		killAfter(cycle, "the failed trial back to Bypass", func(p phase) bool { return p.name == "open" && p.failedTrials >= 1 })
		h.failCalls.Store(false)
		killAfter(cycle, "a trial of the recovered webhook", func(p phase) bool { return p.name == "trial" && p.failedTrials >= 1 })
		killAfter(cycle, "closed", func(p phase) bool { return p.name == "closed" })
		t.Logf("cycle %d: open → trial → failed → trial → closed in %s, 5 kills", cycle, time.Since(start).Round(100*time.Millisecond))
	}
	stop()
	seen.check(t)
	var now admissionregistrationv1.ValidatingWebhookConfiguration
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &now); err != nil {
		t.Fatal(err)
	}
	if mustJSON(now.Webhooks) != mustJSON(original.Webhooks) || mustJSON(now.Annotations) != mustJSON(original.Annotations) {
		t.Errorf("after ten cycles the configuration is not its original:\n%s\n%v", mustJSON(now.Webhooks), now.Annotations)
	}
}
