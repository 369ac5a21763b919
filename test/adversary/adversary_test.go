package adversary_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"pgregory.net/rapid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/ownersim"
)

// TestAdversary runs rapid's generated sequences (see the package doc) on
// one control plane and one pair of controller replicas, from each seed
// (see seeds). Replay a failure with the seed it prints (-rapid.seed, or
// RAPID_SEED) or its fail file (-rapid.failfile).
func TestAdversary(t *testing.T) {
	w := newWorld(t)
	for _, seed := range seeds {
		if seed != "" {
			if err := flag.Set("rapid.seed", seed); err != nil {
				t.Fatal(err)
			}
		}
		t.Run("seed-"+seed, func(t *testing.T) { rapid.Check(t, w.sequence) })
	}
	w.rec.mu.Lock()
	n := len(w.rec.writes)
	w.rec.mu.Unlock()
	t.Logf("%d sequences, %d steps in all; the controller made %d writes of configurations", w.cases.Load(), steps.Load(), n)
}

// sequence is one generated sequence: a configuration and a breaker of its
// own, steps drawn from the actions below, each followed by the history's
// invariants, and a recovery at the end.
func (w *world) sequence(rt *rapid.T) {
	c := w.newCase(rt)
	defer c.close()
	actions := map[string]func(*rapid.T){
		"fault":   c.fault,
		"recover": c.recover,
		"owner":   c.ownerWrite,
		"admin":   c.adminEdit,
		"kill":    c.kill,
		"breaker": c.editBreaker,
		"wait":    c.wait,
	}
	// Weighted: what happens to an open circuit is what finds loops, so
	// faults, owners and time come up more often than the rest.
	weighted := []string{"owner", "wait", "owner", "admin", "wait", "fault", "owner", "kill", "admin", "wait", "breaker", "owner", "recover"}
	// Every sequence begins in an outage: most of what can go wrong does
	// while a circuit is open.
	c.fault(rt)
	rt.Repeat(map[string]func(*rapid.T){
		"": c.check,
		"step": func(rt *rapid.T) {
			actions[rapid.SampledFrom(weighted).Draw(rt, "action")](rt)
			pause()
		},
	})
	c.recover(rt)
	// A long run's progress, as it goes (go test -v streams it).
	w.t.Logf("%s: sequence %d passed; %d steps in all", time.Now().Format("15:04:05"), w.cases.Load(), steps.Load())
}

// seqCase is one sequence's configuration, breaker and model of what
// happened: the episode (from one recovery to the next) and the breaker's
// edits in it.
type seqCase struct {
	w        *world
	ctx      context.Context
	stop     context.CancelFunc
	name     string
	webhook  string
	label    map[string]string
	hist     *history
	want     *admissionregistrationv1.MutatingWebhookConfiguration
	owners   map[ownersim.Pattern]*ownersim.Owner
	ca       int // the caBundle spelling owners write next
	spec     v1alpha1.WebhookCircuitBreakerSpec
	altTrial bool   // the operator changed the half-open trial (see normalize)
	faulty   string // the fault on now, "" when none
	// episode is when the current episode began; edits are the breaker's
	// edits (and re-creations) since, each a new instruction; recreated,
	// the re-creations alone (a new breaker knows nothing of the last one's
	// outage).
	episode   time.Time
	edits     []time.Time
	recreated []time.Time
	trace     []string
}

// steps counts the steps of every sequence run, for the log.
var steps atomicCounter

func (w *world) newCase(rt *rapid.T) *seqCase {
	n := w.cases.Add(1)
	if err := w.running(); err != nil {
		rt.Fatal(err)
	}
	name := fmt.Sprintf("adv-%d", n)
	sum := sha256.Sum256([]byte(name))
	id := hex.EncodeToString(sum[:6])
	c := &seqCase{w: w, name: name, webhook: "t" + id + ".adversary.tripswitch.test", label: map[string]string{"tripswitch.test/adversary": id},
		owners: map[ownersim.Pattern]*ownersim.Owner{}, episode: time.Now()}
	c.ctx, c.stop = context.WithCancel(context.Background())
	w.hook.SetStatus(0)
	w.hook.SetDelay(0)
	w.hook.SetReviewStatus(0)
	if err := w.gate.set(gateOpen); err != nil {
		rt.Fatal(err)
	}
	c.want = c.template()
	c.hist = watchHistory(c.ctx, w.cs, name)
	if err := w.env.Client.Create(c.ctx, c.want.DeepCopy(), client.FieldOwner("helm")); err != nil {
		rt.Fatal(err)
	}
	var cms []string
	for i := range 3 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-%d", name, i), Labels: c.label}}
		if err := w.env.Client.Create(c.ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
			rt.Fatal(err)
		}
		cms = append(cms, cm.Name)
	}
	go traffic(c.ctx, w.env.Client, "default", cms)
	c.spec = v1alpha1.WebhookCircuitBreakerSpec{
		Target:                        v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: name, WebhookName: c.webhook},
		AllowAdmissionWithoutMutation: true,
		OpenAction:                    rapid.SampledFrom([]v1alpha1.OpenAction{v1alpha1.OpenActionIgnore, v1alpha1.OpenActionBypass}).Draw(rt, "openAction"),
		Probe: v1alpha1.ProbeSpec{Interval: &metav1.Duration{Duration: 200 * time.Millisecond}, Timeout: &metav1.Duration{Duration: 150 * time.Millisecond},
			FailureThreshold: 2, SuccessThreshold: 2},
	}
	if rapid.SampledFrom([]bool{true, true, false}).Draw(rt, "apiServerSignal") {
		c.spec.APIServerSignal = &v1alpha1.APIServerSignalSpec{Enabled: true, Window: &metav1.Duration{Duration: 10 * time.Second}, MinimumCalls: 5, FailureRateThreshold: 50}
	}
	c.createBreaker(rt)
	c.log("case %s: %s, signal %v", name, c.spec.OpenAction, c.spec.APIServerSignal != nil)
	return c
}

// halfOpen is the breakers' trial: short, on every request sampled.
func halfOpen() *v1alpha1.HalfOpenSpec {
	return &v1alpha1.HalfOpenSpec{After: &metav1.Duration{Duration: time.Second}, Window: &metav1.Duration{Duration: 10 * time.Second},
		SamplePercent: 100, MaxWait: &metav1.Duration{Duration: 15 * time.Second}, MaxBackoff: &metav1.Duration{Duration: 2 * time.Second}}
}

// template is what the configuration's owners want: a webhook never called
// and the target, called for updates of the case's ConfigMaps, failing
// closed, with a matchCondition of the owners' own.
func (c *seqCase) template() *admissionregistrationv1.MutatingWebhookConfiguration {
	hook := func(name string, sel map[string]string) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:         name,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + c.w.gate.addr + "/mutate"), CABundle: c.w.hook.CABundle},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](1),
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: sel},
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "owner.example.com/ours", Expression: "true"}},
		}
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: c.name, Labels: map[string]string{"app.kubernetes.io/managed-by": "owner"},
			Annotations: map[string]string{"owner.example.com/template": "1"}},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			hook("other.adversary.tripswitch.test", map[string]string{"tripswitch.test/never": "true"}),
			hook(c.webhook, c.label),
		},
	}
}

// normalize keeps c.spec valid: a half-open trial with Bypass and the
// signal (their only combination: without a halfOpen of the operator's
// they run the defaults') and none without. The operator's edit of the
// trial halves its sample and doubles its wait; both stay short, so that
// a recovery settles within the bound recover allows (the defaults' 6 %
// sample may never see the case's few objects, and close only after
// their 2 minutes' maxWait).
func (c *seqCase) normalize() {
	c.spec.HalfOpen = nil
	if c.spec.OpenAction == v1alpha1.OpenActionBypass && c.spec.APIServerSignal != nil {
		c.spec.HalfOpen = halfOpen()
		if c.altTrial {
			c.spec.HalfOpen.SamplePercent = 50
			c.spec.HalfOpen.After = &metav1.Duration{Duration: 2 * time.Second}
		}
	}
}

func (c *seqCase) createBreaker(rt *rapid.T) {
	c.normalize()
	b := &v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: c.name}, Spec: *c.spec.DeepCopy()}
	for {
		err := c.w.env.Client.Create(c.ctx, b)
		if err == nil {
			return
		}
		if !apierrors.IsAlreadyExists(err) {
			rt.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the last one's finalizer is still restoring
	}
}

func (c *seqCase) breaker() (*v1alpha1.WebhookCircuitBreaker, error) {
	var b v1alpha1.WebhookCircuitBreaker
	err := c.w.env.Client.Get(c.ctx, types.NamespacedName{Name: c.name}, &b)
	return &b, err
}

func (c *seqCase) config() (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	err := c.w.env.Client.Get(c.ctx, types.NamespacedName{Name: c.name}, &cfg)
	return &cfg, err
}

func (c *seqCase) log(format string, args ...any) {
	c.trace = append(c.trace, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
}

// close deletes the breaker (its finalizer restores the webhook), then the
// configuration and the ConfigMaps.
func (c *seqCase) close() {
	ctx := context.Background()
	_ = c.w.running()
	_ = c.w.env.Client.Delete(ctx, &v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: c.name}})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := c.breaker(); apierrors.IsNotFound(err) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.stop()
	_ = c.w.env.Client.Delete(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: c.name}})
	_ = c.w.env.Client.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace("default"), client.MatchingLabels(c.label))
}

// step is what every action does first: count it, and restart a replica a
// kill left down in the last step.
func (c *seqCase) step(rt *rapid.T, what string, args ...any) {
	steps.Add(1)
	if err := c.w.running(); err != nil {
		rt.Fatal(err)
	}
	c.log(what, args...)
}

// fault makes the webhook fail one way: HTTP 500 everywhere, a 2 s delay
// (past every timeout), its connections reset or refused, or admission
// reviews alone failing while /healthz passes (only the API server signal
// sees that).
func (c *seqCase) fault(rt *rapid.T) {
	f := rapid.SampledFrom([]string{"500", "delay", "reset", "refused", "reviews"}).Draw(rt, "fault")
	c.step(rt, "fault %s", f)
	// The new fault first, then the old one off: in between, the webhook
	// fails both ways, never neither (one healthy answer ends an outage).
	h := c.w.hook
	status, delay, reviews, gate := 0, time.Duration(0), 0, gateOpen
	switch f {
	case "500":
		status = http.StatusInternalServerError
		h.SetStatus(status)
	case "delay":
		delay = 2 * time.Second
		h.SetDelay(delay)
	case "reset", "refused":
		gate = map[string]gateMode{"reset": gateReset, "refused": gateRefuse}[f]
		if err := c.w.gate.set(gate); err != nil {
			rt.Fatal(err)
		}
	case "reviews":
		reviews = http.StatusInternalServerError
		h.SetReviewStatus(reviews)
	}
	h.SetStatus(status)
	h.SetDelay(delay)
	h.SetReviewStatus(reviews)
	if err := c.w.gate.set(gate); err != nil {
		rt.Fatal(err)
	}
	c.faulty = f
	// Let the circuit open (or 5 s pass: it may not, in some modes or
	// without the signal): what comes next should meet it open.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if cfg, err := c.config(); err == nil && held(cfg, c.webhook) {
			return
		}
	}
}

// wait lets time pass: probes, the signal, owners and trials act.
func (c *seqCase) wait(rt *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{time.Second, 300 * time.Millisecond, 2 * time.Second, 4 * time.Second}).Draw(rt, "wait")
	c.step(rt, "wait %s", d)
	time.Sleep(d)
}

// pause gives the controller a moment to act on the last step (two probe
// intervals and a reconcile) before the next one, so that steps meet an
// open circuit as often as a closed one.
func pause() { time.Sleep(500 * time.Millisecond) }

// kill sends SIGKILL to one replica, or both; what is down restarts at the
// next step.
func (c *seqCase) kill(rt *rapid.T) {
	which := rapid.SampledFrom([]string{"0", "1", "both"}).Draw(rt, "kill")
	c.step(rt, "kill %s", which)
	for i, r := range c.w.reps {
		if which == "both" || which == fmt.Sprint(i) {
			r.kill()
		}
	}
}

// ownerWrite is one write of an owner of the configuration, the way a
// project writes: each pattern is a real API client with a field manager of
// its own.
func (c *seqCase) ownerWrite(rt *rapid.T) {
	p := rapid.SampledFrom([]ownersim.Pattern{ownersim.WholeUpdate, ownersim.ApplyForce, ownersim.Apply, ownersim.ClientSideApply,
		ownersim.MergePatch, ownersim.Recreate, ownersim.PolicyUpdate, ownersim.CABundleApply, ownersim.StrategicPatch}).Draw(rt, "owner")
	c.step(rt, "owner %s", p)
	o, ok := c.owners[p]
	if !ok {
		var err error
		if o, err = ownersim.New(c.w.env.Config, c.w.env.Scheme, p, "adv-"+string(p), c.want); err != nil {
			rt.Fatal(err)
		}
		c.owners[p] = o
	}
	// The caBundle injectors write a spelling of the same CA: the probes
	// and the API server still trust it, and each write changes something.
	c.ca++
	o.SetCABundle(append(bytes.Clone(c.w.hook.CABundle), bytes.Repeat([]byte("\n"), c.ca%3)...))
	if err := o.Write(c.ctx); err != nil && !apierrors.IsNotFound(err) && !strings.Contains(err.Error(), "not found") {
		rt.Fatalf("owner %s: %v", p, err)
	}
}

// adminEdit is a person's kubectl edit of the target webhook: its
// failurePolicy set, tripswitch's matchCondition removed, or nothing
// changed at all.
func (c *seqCase) adminEdit(rt *rapid.T) {
	edit := rapid.SampledFrom([]string{"fail", "ignore", "remove-condition", "no-op"}).Draw(rt, "admin")
	c.step(rt, "admin %s", edit)
	for range 20 {
		cfg, err := c.config()
		if apierrors.IsNotFound(err) {
			return
		}
		if err != nil {
			rt.Fatal(err)
		}
		for i := range cfg.Webhooks {
			h := &cfg.Webhooks[i]
			if h.Name != c.webhook {
				continue
			}
			switch edit {
			case "fail":
				h.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
			case "ignore":
				h.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
			case "remove-condition":
				h.MatchConditions = slices.DeleteFunc(h.MatchConditions, func(m admissionregistrationv1.MatchCondition) bool { return m.Name == conditionName })
			}
		}
		err = c.w.env.Client.Update(c.ctx, cfg, client.FieldOwner("kubectl-edit"))
		if err == nil || apierrors.IsNotFound(err) {
			return
		}
		if !apierrors.IsConflict(err) {
			rt.Fatal(err)
		}
	}
}

// editBreaker is an operator's edit of the breaker: its mode, its
// openAction, the API server signal, the half-open trial, or the breaker
// deleted (its finalizer restores the webhook) and created again.
func (c *seqCase) editBreaker(rt *rapid.T) {
	edit := rapid.SampledFrom([]string{"mode", "openAction", "signal", "halfOpen", "recreate"}).Draw(rt, "breakerEdit")
	mode := rapid.SampledFrom([]v1alpha1.Mode{v1alpha1.ModeAuto, v1alpha1.ModeForceOpen, v1alpha1.ModeForceClosed, v1alpha1.ModeObserve}).Draw(rt, "mode")
	c.step(rt, "breaker %s (mode %s)", edit, mode)
	switch edit {
	case "mode":
		c.spec.Mode = mode
	case "openAction":
		c.spec.OpenAction = map[v1alpha1.OpenAction]v1alpha1.OpenAction{v1alpha1.OpenActionIgnore: v1alpha1.OpenActionBypass, v1alpha1.OpenActionBypass: v1alpha1.OpenActionIgnore}[c.spec.OpenAction]
	case "halfOpen":
		c.altTrial = !c.altTrial
	case "signal":
		if c.spec.APIServerSignal != nil {
			c.spec.APIServerSignal = nil
		} else {
			c.spec.APIServerSignal = &v1alpha1.APIServerSignalSpec{Enabled: true, Window: &metav1.Duration{Duration: 10 * time.Second}, MinimumCalls: 5, FailureRateThreshold: 50}
		}
	case "recreate":
		c.edits = append(c.edits, time.Now())
		c.recreated = append(c.recreated, time.Now())
		if err := c.w.env.Client.Delete(c.ctx, &v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: c.name}}); err != nil && !apierrors.IsNotFound(err) {
			rt.Fatal(err)
		}
		c.createBreaker(rt)
		return
	}
	c.setSpec(rt)
}

// setSpec writes c.spec to the breaker: a new generation.
func (c *seqCase) setSpec(rt *rapid.T) {
	c.normalize()
	for range 20 {
		b, err := c.breaker()
		if err != nil {
			rt.Fatal(err)
		}
		if equalJSON(b.Spec, c.spec) {
			return
		}
		c.edits = append(c.edits, time.Now())
		b.Spec = *c.spec.DeepCopy()
		if err := c.w.env.Client.Update(c.ctx, b); err == nil {
			return
		} else if !apierrors.IsConflict(err) {
			rt.Fatal(err)
		}
	}
}

// recover ends the outage: the webhook answers again and the breaker goes
// back to Auto, and then, within two minutes, the breaker must settle
// closed and armed, holding nothing. The episode's promises are checked at
// its end: the configuration is what its last writer other than
// tripswitch wanted, every undo was said, and no storm of warnings.
func (c *seqCase) recover(rt *rapid.T) {
	c.step(rt, "recover")
	h := c.w.hook
	h.SetStatus(0)
	h.SetDelay(0)
	h.SetReviewStatus(0)
	if err := c.w.gate.set(gateOpen); err != nil {
		rt.Fatal(err)
	}
	c.faulty = ""
	if c.spec.Mode != "" && c.spec.Mode != v1alpha1.ModeAuto {
		c.spec.Mode = v1alpha1.ModeAuto
		c.setSpec(rt)
	}
	var stable time.Time
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ok, why := c.settled()
		switch {
		case ok && stable.IsZero():
			stable = time.Now()
		case ok && time.Since(stable) > 1500*time.Millisecond:
			c.check(rt)
			c.checkEpisode(rt)
			c.episode, c.edits, c.recreated = time.Now(), nil, nil
			return
		case !ok:
			stable = time.Time{}
		}
		if time.Now().After(deadline) {
			c.fail(rt, "the breaker did not settle closed and armed within 2 minutes of the recovery: %s", why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// settled reports whether the breaker is Closed and armed, and the
// configuration holds no record of it.
func (c *seqCase) settled() (bool, string) {
	b, err := c.breaker()
	if err != nil {
		return false, err.Error()
	}
	cfg, err := c.config()
	if err != nil {
		return false, err.Error()
	}
	if _, ok := cfg.Annotations[recordKey(c.webhook)]; ok {
		return false, "the record is on the configuration"
	}
	s := b.Status
	if s.State != v1alpha1.StateClosed || s.DisarmedReason != "" || s.Record != nil || s.ObservedGeneration != b.Generation {
		return false, fmt.Sprintf("state %s, disarmed %q, generation %d of %d", s.State, s.DisarmedReason, s.ObservedGeneration, b.Generation)
	}
	return true, ""
}

// fail reports a broken promise with the sequence so far.
func (c *seqCase) fail(rt *rapid.T, format string, args ...any) {
	b, _ := c.breaker()
	cfg, _ := c.config()
	rt.Fatalf("%s\n\nsteps:\n%s\n\nbreaker status: %s\n\nconfiguration: %s", fmt.Sprintf(format, args...), strings.Join(c.trace, "\n"),
		jsonOf(b.Status), jsonOf(cfg))
}
