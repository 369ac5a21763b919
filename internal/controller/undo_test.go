package controller_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/ownersim"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/slowhook"
	"github.com/tripswitch-dev/tripswitch/internal/jsonpatch"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// outageFault is how a test's webhook fails.
type outageFault string

const (
	// outage500: every answer, /healthz included, is HTTP 500.
	outage500 outageFault = "500"
	// outageDelay: every answer waits 2 s, past the probes' and the API
	// server's timeouts.
	outageDelay outageFault = "delay"
	// outageReviews: admission reviews answer 500 while /healthz passes:
	// only the API server signal sees the outage.
	outageReviews outageFault = "reviews"
)

func (f outageFault) start(h *slowhook.Server) {
	switch f {
	case outage500:
		h.SetStatus(http.StatusInternalServerError)
	case outageDelay:
		h.SetDelay(2 * time.Second)
	case outageReviews:
		h.SetReviewStatus(http.StatusInternalServerError)
	}
}

func (f outageFault) stop(h *slowhook.Server) {
	h.SetStatus(0)
	h.SetDelay(0)
	h.SetReviewStatus(0)
}

// undoCase is one outage in which someone other than tripswitch writes the
// configuration: an owner simulator that keeps writing it, or an
// administrator who edits it once, after the open (or, with halfOpen,
// once a trial runs).
type undoCase struct {
	pattern       ownersim.Pattern
	every         time.Duration
	onEvent       bool
	recreateDelay time.Duration
	admin         bool
	action        v1alpha1.OpenAction
	halfOpen      bool
	signal        bool
	fault         outageFault
	// holds: the open survives the owner; else the breaker disarms.
	holds bool
}

func (c undoCase) name() string {
	who := string(c.pattern)
	if c.admin {
		who = "admin"
	}
	if c.recreateDelay > 0 {
		who += "-after-" + c.recreateDelay.String()
	}
	act := strings.ToLower(string(c.action))
	if c.halfOpen {
		act += "-halfopen"
	}
	sig := ""
	if c.signal {
		sig = "-signal"
	}
	return fmt.Sprintf("%s-%s-%s%s", who, act, c.fault, sig)
}

// patchLog records the manager's successful patches of webhook
// configurations: each one's RFC 6902 operations.
type patchLog struct {
	mu      sync.Mutex
	patches [][]jsonpatch.Op
}

func (l *patchLog) funcs() *interceptor.Funcs {
	return &interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
		data, _ := p.Data(obj)
		err := c.Patch(ctx, obj, p, opts...)
		if _, ok := obj.(*admissionregistrationv1.MutatingWebhookConfiguration); ok && err == nil {
			var ops []jsonpatch.Op
			_ = json.Unmarshal(data, &ops)
			l.mu.Lock()
			l.patches = append(l.patches, ops)
			l.mu.Unlock()
		}
		return err
	}}
}

// counts are the patches logged from the n-th on: all of them, the opens
// (those that add a record annotation) and the trials started (those that
// set a sample expression).
func (l *patchLog) counts(from int) (all, opens, trials int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ops := range l.patches[min(from, len(l.patches)):] {
		all++
		for _, op := range ops {
			v, _ := op.Value.(string)
			switch {
			case op.Op == "add" && strings.HasPrefix(op.Path, "/metadata/annotations"):
				opens++
			case op.Op == "replace" && strings.HasSuffix(op.Path, "/expression") && strings.HasPrefix(v, circuit.SamplePrefix):
				trials++
			}
		}
	}
	return all, opens, trials
}

// kinds names each patch logged: Open, Close, Drop, TrialStart, TrialEnd.
func (l *patchLog) kinds() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ops := range l.patches {
		kind := "?"
		for _, op := range ops {
			v, _ := op.Value.(string)
			switch {
			case op.Op == "add" && strings.HasPrefix(op.Path, "/metadata/annotations"):
				kind = "Open"
			case op.Op == "remove" && strings.HasPrefix(op.Path, "/metadata/annotations/"):
				if kind == "?" {
					kind = "Drop"
				}
			case op.Op == "replace" && strings.HasSuffix(op.Path, "/expression") && strings.HasPrefix(v, circuit.SamplePrefix):
				kind = "TrialStart"
			case op.Op == "replace" && strings.HasSuffix(op.Path, "/expression") && v == circuit.MatchConditionExpression:
				kind = "TrialEnd"
			case op.Op == "test" && strings.HasSuffix(op.Path, "/failurePolicy") || op.Op == "remove" && strings.Contains(op.Path, "/matchConditions"):
				if kind == "?" || kind == "Drop" {
					kind = "Close"
				}
			}
		}
		out = append(out, kind)
	}
	return out
}

func (l *patchLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.patches)
}

// TestARecreatingOwnerIsAnUndo: an owner that deletes its configuration
// whenever it drifts and creates it again from its template (a new UID),
// at once or 3 s later, through an outage of a 500 or a 2 s delay, with
// Ignore and with Bypass. A configuration recreated while its circuit is
// open and its webhook still fails is someone undoing the open: the
// breaker disarms, names the owner, writes nothing more, and starts fresh
// once the webhook is healthy again.
func TestARecreatingOwnerIsAnUndo(t *testing.T) {
	var cases []undoCase
	for _, delay := range []time.Duration{0, 3 * time.Second} {
		for _, action := range []v1alpha1.OpenAction{v1alpha1.OpenActionIgnore, v1alpha1.OpenActionBypass} {
			for _, f := range []outageFault{outage500, outageDelay} {
				cases = append(cases, undoCase{pattern: ownersim.Recreate, every: time.Second, onEvent: true, recreateDelay: delay, action: action, fault: f})
			}
		}
	}
	for _, tc := range cases {
		t.Run(tc.name(), func(t *testing.T) {
			t.Parallel()
			undoOutage(t, tc)
		})
	}
}

// TestAnUndoneOpenStaysUndoneWithTheSignal: the API server's calls to the
// webhook fail while its health endpoint passes, so the API server signal
// opens the circuit, healthy probes and all. An administrator's edit, or
// an owner's write, that undoes the open disarms the breaker until the API
// server's own calls pass again: it never opens over them, with Ignore,
// Bypass, and Bypass with half-open trials; and the same edit without the
// signal, on a webhook the probes see fail.
func TestAnUndoneOpenStaysUndoneWithTheSignal(t *testing.T) {
	ignore, bypass := v1alpha1.OpenActionIgnore, v1alpha1.OpenActionBypass
	var cases []undoCase
	// With the signal on, Bypass always closes through half-open trials
	// (their failurePolicy Ignore is what an owner that applies its
	// failurePolicy puts back), so each writer undoes the open.
	for _, halfOpen := range []bool{false, true} {
		action := ignore
		if halfOpen {
			action = bypass
		}
		cases = append(cases, undoCase{admin: true, action: action, halfOpen: halfOpen, signal: true, fault: outageReviews})
		for _, o := range []struct {
			pattern ownersim.Pattern
			every   time.Duration
			onEvent bool
		}{
			{ownersim.ApplyForce, 2 * time.Second, false},
			{ownersim.ClientSideApply, 2 * time.Second, false},
			{ownersim.WholeUpdate, 1500 * time.Millisecond, true},
		} {
			cases = append(cases, undoCase{pattern: o.pattern, every: o.every, onEvent: o.onEvent, action: action, halfOpen: halfOpen, signal: true, fault: outageReviews})
		}
	}
	// Without it, on a webhook the probes see fail: an administrator's
	// edit of either action, and client-side apply (kubectl's, Argo CD's
	// default), which puts the failurePolicy back and keeps tripswitch's
	// matchCondition.
	cases = append(cases,
		undoCase{admin: true, action: ignore, fault: outageDelay},
		undoCase{admin: true, action: bypass, fault: outageDelay},
		undoCase{pattern: ownersim.ClientSideApply, every: 2 * time.Second, action: ignore, fault: outageDelay},
		undoCase{pattern: ownersim.ClientSideApply, every: 2 * time.Second, action: bypass, fault: outageDelay, holds: true},
	)
	for _, tc := range cases {
		t.Run(tc.name(), func(t *testing.T) {
			t.Parallel()
			undoOutage(t, tc)
		})
	}
}

// undoTemplate is the configuration an owner (or an installer) wants: the
// bed's two webhooks, the target served by hook and called by the API
// server for ConfigMaps created with the test's label, failing closed.
func undoTemplate(b *bed, hook *slowhook.Server, webhook string, label map[string]string) *admissionregistrationv1.MutatingWebhookConfiguration {
	w := func(name, path string, sel map[string]string) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:         name,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.URL + path), CABundle: hook.CABundle},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](1),
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: sel},
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "owner.example.com/not-leases", Expression: "true"}},
		}
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: b.cfg, Labels: map[string]string{"app.kubernetes.io/managed-by": "owner"},
			Annotations: map[string]string{"owner.example.com/template": "1"}},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			w(other, "/other", map[string]string{"tripswitch.test/never": "true"}),
			w(webhook, "/mutate", label),
		},
	}
}

// traffic creates ConfigMaps with label (dry run: nothing is stored) every
// 100 ms until ctx ends, so that the API server calls the webhook.
func traffic(ctx context.Context, c client.Client, label map[string]string) {
	for i := 0; ctx.Err() == nil; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", GenerateName: "traffic-", Labels: label}}
		_ = c.Create(ctx, cm, client.DryRunAll)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// undoOutage runs the manager (the real reconciler and watches, the real
// HTTPS prober, the API server signal if on) through one outage and its
// recovery while tc's writer writes the configuration, and checks the
// promises every breaker keeps: at most 2 writes to the configuration
// (plus 2 per half-open trial) whatever the outage's length; never an open
// over a value someone else set during the outage; the breaker either
// holds the circuit open or is Disarmed naming the writer; at the end no
// record, Closed and re-armed, and the configuration as its writer wants
// it.
func undoOutage(t *testing.T, tc undoCase) {
	b := newBed(t)
	cp := controlPlane(t)
	hook, err := slowhook.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hook.Close() })
	sum := sha256.Sum256([]byte(b.cfg)) // a label value is at most 63 bytes
	id := hex.EncodeToString(sum[:8])
	label := map[string]string{"tripswitch.test/undo": id}
	// A webhook name of the test's own: the API server's metrics count
	// calls by webhook name, and the signal (and a trial) must count only
	// this test's.
	webhook := "t" + id + ".undo.tripswitch.test"
	want := undoTemplate(b, hook, webhook, label)
	manager := "sim-" + string(tc.pattern)
	if tc.admin {
		manager = "kubectl-edit"
	}
	var owner *ownersim.Owner
	if tc.admin {
		if err := b.c.Create(b.ctx, want.DeepCopy(), client.FieldOwner("helm")); err != nil {
			t.Fatal(err)
		}
	} else {
		if owner, err = ownersim.New(cp.Config, cp.Scheme, tc.pattern, manager, want); err != nil {
			t.Fatal(err)
		}
		owner.SetRecreateDelay(tc.recreateDelay)
		if err := owner.Create(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
	ctx, stop := context.WithCancel(b.ctx)
	var wg sync.WaitGroup
	var ownerErr error
	defer func() { stop(); wg.Wait() }()
	if owner != nil {
		wg.Go(func() { ownerErr = owner.Run(ctx, tc.every, tc.onEvent) })
	}
	if tc.signal {
		wg.Go(func() { traffic(ctx, b.c, label) })
	}

	wcb := b.createBreaker(b.cfg, func(w *v1alpha1.WebhookCircuitBreaker) {
		w.Spec.Target.WebhookName = webhook
		w.Spec.OpenAction = tc.action
		w.Spec.Probe = v1alpha1.ProbeSpec{Interval: &metav1.Duration{Duration: 500 * time.Millisecond}, Timeout: &metav1.Duration{Duration: 500 * time.Millisecond},
			FailureThreshold: 2, SuccessThreshold: 2}
		if tc.signal {
			w.Spec.APIServerSignal = &v1alpha1.APIServerSignalSpec{Enabled: true, Window: &metav1.Duration{Duration: 10 * time.Second}, MinimumCalls: 5, FailureRateThreshold: 50}
		}
		if tc.halfOpen {
			w.Spec.HalfOpen = &v1alpha1.HalfOpenSpec{After: &metav1.Duration{Duration: 2 * time.Second}, Window: &metav1.Duration{Duration: 10 * time.Second}, SamplePercent: 100}
		}
	})
	// held: the configuration carries the breaker's record.
	held := func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) bool {
		_, ok := cfg.Annotations[circuit.AnnotationKey(webhook)]
		return ok
	}
	var log patchLog
	runManagerOpts(t, b.cfg, controller.Options{Prober: &probe.HTTPProber{}, SignalInterval: 500 * time.Millisecond}, log.funcs())
	eventually(t, "armed", func() bool {
		got := b.getBreaker(wcb.Name)
		return got.Status.State == v1alpha1.StateClosed && (!tc.signal || got.Status.APIServer != nil && !got.Status.APIServer.Failing)
	})
	start := log.len()

	tc.fault.start(hook)
	var adminValue []byte // the target webhook as the administrator left it
	if tc.admin {
		eventuallyWithin(t, 60*time.Second, "open (in a trial, with halfOpen)", func() bool {
			rec, _ := circuit.ReadRecord(b.getConfig().Annotations, webhook)
			return rec != nil && (!tc.halfOpen || rec.Trial != nil)
		})
		adminValue = adminUndo(t, b, webhook, tc.action, tc.halfOpen)
	}
	afterAdmin := log.len()
	outage := time.Now()
	if tc.holds {
		eventually(t, "open", func() bool {
			return held(b.getConfig()) && b.getBreaker(wcb.Name).Status.State == v1alpha1.StateOpen
		})
	} else {
		deadline := time.Now().Add(40 * time.Second)
		for got := b.getBreaker(wcb.Name); got.Status.State != v1alpha1.StateDisarmed || held(b.getConfig()); got = b.getBreaker(wcb.Name) {
			if time.Now().After(deadline) {
				all, opens, _ := log.counts(start)
				t.Fatalf("not disarmed 40s into the outage, after %d writes to the configuration (%d opens): state %s, %s; outage window %+v",
					all, opens, got.Status.State, condition(got, v1alpha1.ConditionReady).Message, got.Status.Outage)
			}
			time.Sleep(50 * time.Millisecond)
		}
		got := b.getBreaker(wcb.Name)
		// An edit that only removes a field (the administrator's of
		// tripswitch's matchCondition) leaves no trace in managedFields.
		named := !tc.admin || tc.action == v1alpha1.OpenActionIgnore || tc.halfOpen
		if named && !strings.Contains(got.Status.DisarmedReason, manager) || !strings.Contains(got.Status.DisarmedReason, "undid tripswitch's") {
			t.Errorf("disarm does not name %s and what it undid: %q", manager, got.Status.DisarmedReason)
		}
		t.Logf("disarmed %.1fs into the outage: %s", time.Since(outage).Seconds(), got.Status.DisarmedReason)
	}
	// The outage goes on for 8 s more (the owner keeps writing): nothing
	// more is written but what the budget allows.
	time.Sleep(8 * time.Second)
	all, opens, trials := log.counts(start)
	if limit := 2 + 2*trials; all > limit {
		t.Fatalf("%d writes to the configuration in the outage so far (%d opens, %d trials), more than the %d it may cost", all, opens, trials, limit)
	}
	if tc.admin {
		if _, opensAfter, _ := log.counts(afterAdmin); opensAfter > 0 {
			t.Fatalf("tripswitch opened the circuit again %d times after the administrator undid it", opensAfter)
		}
		if got := webhookJSON(t, b.getConfig(), webhook); got != string(adminValue) {
			t.Fatalf("the administrator's value was written over: %s, want %s", got, adminValue)
		}
	}
	if got := b.getBreaker(wcb.Name); tc.holds != (got.Status.State == v1alpha1.StateOpen) {
		t.Fatalf("mid-outage the breaker is %s, want open %v; writes %v; window %+v; history %+v", got.Status.State, tc.holds, log.kinds(), got.Status.Outage, got.Status.History)
	}

	tc.fault.stop(hook)
	// The signal confirms a recovery once the failures have left its
	// window and enough calls passed: slow on a busy machine.
	eventuallyWithin(t, 90*time.Second, "closed and re-armed after recovery", func() bool {
		got := b.getBreaker(wcb.Name)
		return got.Status.State == v1alpha1.StateClosed && got.Status.DisarmedReason == "" && got.Status.Record == nil && !held(b.getConfig())
	})
	all, opens, trials = log.counts(start)
	stop()
	wg.Wait()
	if ownerErr != nil {
		t.Fatalf("owner: %v", ownerErr)
	}
	if limit := 2 + 2*trials; all > limit {
		t.Fatalf("%d writes to the configuration in one outage (%d opens, %d trials), more than the %d it may cost", all, opens, trials, limit)
	}
	end := b.getConfig()
	for k := range end.Annotations {
		if strings.HasPrefix(k, "tripswitch.dev/") {
			t.Fatalf("annotation %s left on the configuration", k)
		}
	}
	if w := hookOf(t, end, webhook); slices.ContainsFunc(w.MatchConditions, func(c admissionregistrationv1.MatchCondition) bool { return c.Name == circuit.MatchConditionName }) {
		t.Fatalf("tripswitch's matchCondition left on the webhook: %s", webhookJSON(t, end, webhook))
	}
	if tc.admin {
		if got := webhookJSON(t, end, webhook); got != string(adminValue) {
			t.Fatalf("after recovery the webhook is %s, want the administrator's %s", got, adminValue)
		}
	}
	t.Logf("RESULT %s: %d writes in the outage (%d opens, %d trials): %v", tc.name(), all, opens, trials, log.kinds()[start:])
}

// adminUndo is a person's kubectl edit of the open circuit: failurePolicy
// Fail again (Ignore, or a trial's Ignore), or tripswitch's matchCondition
// removed (Bypass). It returns the webhook entry as the edit left it.
func adminUndo(t *testing.T, b *bed, webhook string, action v1alpha1.OpenAction, trial bool) []byte {
	t.Helper()
	for {
		cfg := b.getConfig()
		for i := range cfg.Webhooks {
			w := &cfg.Webhooks[i]
			if w.Name != webhook {
				continue
			}
			if action == v1alpha1.OpenActionIgnore || trial {
				w.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
			} else {
				w.MatchConditions = slices.DeleteFunc(w.MatchConditions, func(c admissionregistrationv1.MatchCondition) bool { return c.Name == circuit.MatchConditionName })
			}
		}
		err := b.c.Update(b.ctx, cfg, client.FieldOwner("kubectl-edit"))
		if err == nil {
			// What the administrator wants: their entry, without what
			// tripswitch still holds of a trial they cut short (its
			// sampled matchCondition, which tripswitch removes as it lets
			// go).
			w := hookOf(t, cfg, webhook)
			w.MatchConditions = slices.DeleteFunc(w.MatchConditions, func(c admissionregistrationv1.MatchCondition) bool { return c.Name == circuit.MatchConditionName })
			if len(w.MatchConditions) == 0 {
				w.MatchConditions = nil
			}
			data, err := json.Marshal(w)
			if err != nil {
				t.Fatal(err)
			}
			return data
		}
		if !strings.Contains(err.Error(), "the object has been modified") {
			t.Fatalf("administrator's edit: %v", err)
		}
	}
}

// eventuallyWithin polls cond every 50 ms for up to limit.
func eventuallyWithin(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting: %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
