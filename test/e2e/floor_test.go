package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
	"github.com/tripswitch-dev/tripswitch/internal/floor"
)

// floorTimeline merges the versions of a webhook configuration and of its
// fallback policy the API server shows two watches, in resourceVersion
// order (one etcd: one revision counter for both), so the state the two
// made together is known at every revision.
type floorTimeline struct {
	mu     sync.Mutex
	events []floorEvent
}

type floorEvent struct {
	rv     int64
	policy bool // else the configuration
	on     bool // policy: armed; configuration: open (tripswitch's record on it)
}

func (tl *floorTimeline) add(e floorEvent) {
	tl.mu.Lock()
	tl.events = append(tl.events, e)
	tl.mu.Unlock()
}

// now is the state of the latest events seen: webhook open, floor armed.
func (tl *floorTimeline) now() (open, armed bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, e := range tl.events {
		if e.policy {
			armed = e.on
		} else {
			open = e.on
		}
	}
	return open, armed
}

// looser returns every revision at which the webhook was open while its
// floor was not armed: the one state tripswitch must never make.
func (tl *floorTimeline) looser() []int64 {
	tl.mu.Lock()
	events := append([]floorEvent(nil), tl.events...)
	tl.mu.Unlock()
	sort.Slice(events, func(i, j int) bool { return events[i].rv < events[j].rv })
	var open, armed bool
	var bad []int64
	for _, e := range events {
		if e.policy {
			armed = e.on
		} else {
			open = e.on
		}
		if open && !armed {
			bad = append(bad, e.rv)
		}
	}
	return bad
}

func watchFloor(t *testing.T, cs *kubernetes.Clientset, cfgName, policyName string) *floorTimeline {
	t.Helper()
	ctx := t.Context()
	tl := &floorTimeline{}
	api := cs.AdmissionregistrationV1()
	wc, err := api.ValidatingWebhookConfigurations().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + cfgName})
	if err != nil {
		t.Fatal(err)
	}
	wp, err := api.ValidatingAdmissionPolicies().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + policyName})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []watch.Interface{wc, wp} {
		go func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				if ev.Type == watch.Deleted || ev.Type == watch.Error {
					continue
				}
				o, ok := ev.Object.(client.Object)
				if !ok {
					continue
				}
				rv, _ := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
				switch x := o.(type) {
				case *admissionregistrationv1.ValidatingWebhookConfiguration:
					_, recorded := x.Annotations[circuit.AnnotationKey(floorWebhook)]
					tl.add(floorEvent{rv: rv, on: recorded})
				case *admissionregistrationv1.ValidatingAdmissionPolicy:
					armed := true
					for _, c := range x.Spec.MatchConditions {
						if c.Name == floor.MatchConditionName {
							armed = false
						}
					}
					tl.add(floorEvent{rv: rv, policy: true, on: armed})
				}
			}
		}()
	}
	return tl
}

const floorWebhook = "kill.floor.tripswitch.e2e"

// holdingProxy serves the controller's API requests by forwarding them to
// the API server as the administrator, and holds (never forwards) the one
// request it is told to, until its client goes away: the controller can be
// killed with exactly the first of its two writes made.
type holdingProxy struct {
	url  string
	mu   sync.Mutex
	hold func(*http.Request) bool
	held chan struct{}
}

func startHoldingProxy(t *testing.T, env *testenv.Env) *holdingProxy {
	t.Helper()
	upstream, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(upstream)
	rp.Transport, rp.FlushInterval = transport, -1 // watches stream
	hp := &holdingProxy{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hp.mu.Lock()
		hold, held := hp.hold, hp.held
		if hold != nil && hold(r) {
			hp.hold = nil
			hp.mu.Unlock()
			close(held)
			// Read the body: only then does the server watch the
			// connection, and end the request's context when it closes.
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done() // the controller was killed
			return
		}
		hp.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	hp.url = srv.URL
	return hp
}

// holdNext holds the next request that matches and returns a channel
// closed once it is held.
func (hp *holdingProxy) holdNext(match func(*http.Request) bool) <-chan struct{} {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	hp.hold, hp.held = match, make(chan struct{})
	return hp.held
}

// kubeconfig is a kubeconfig that reaches the API server through hp.
func (hp *holdingProxy) kubeconfig(t *testing.T) string {
	t.Helper()
	path, err := testenv.ProxyKubeconfig(t.TempDir(), hp.url)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func patchOf(resource, name string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		return r.Method == http.MethodPatch && r.URL.Path == "/apis/admissionregistration.k8s.io/v1/"+resource+"/"+name
	}
}

// TestKillNineBetweenTheFloorsWrites: ten outages of a validating webhook
// whose breaker has a fallback ValidatingAdmissionPolicy. The controller
// binary reaches the API server through a proxy that holds the second of
// the two writes of each step (on the way open the webhook's patch, after
// the floor was armed; on the way closed the policy's disarm, after the
// webhook was restored), and is killed by SIGKILL while it waits for it,
// then restarted. Each time the two objects are as the policy intends,
// stricter never looser (floor armed, webhook closed); over every revision
// the API server shows of them together the webhook is never open while its
// floor is inert; every step converges; after the breaker is deleted both
// objects are byte-identical to how they were written.
func TestKillNineBetweenTheFloorsWrites(t *testing.T) {
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx := t.Context()
	hook := startSlowHook(t)
	const name = "floor-kill"
	never, rule := inNoNamespace, configMapCreates
	cfg := slowValidating(hook, name, floorWebhook)
	pol := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{NamespaceSelector: never,
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: rule}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: floor.MatchConditionName, Expression: floor.MatchConditionExpression}},
			Validations:     []admissionregistrationv1.Validation{{Expression: "'x' in object.metadata.?labels.orValue({})", Message: "label x is required"}}}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}
	for _, o := range []client.Object{cfg, pol, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tl := watchFloor(t, cs, name, name)
	snapshot := func() string {
		var c admissionregistrationv1.ValidatingWebhookConfiguration
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &c); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		return mustJSON(c.Webhooks) + mustJSON(c.Annotations) + mustJSON(p.Spec) + mustJSON(p.Annotations)
	}
	original := snapshot()
	wcb := &v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.WebhookCircuitBreakerSpec{
			Target:                          v1alpha1.Target{Kind: v1alpha1.ValidatingWebhookConfiguration, ConfigurationName: name, WebhookName: floorWebhook},
			AllowAdmissionWithoutValidation: true,
			OpenAction:                      v1alpha1.OpenActionBypass,
			WhileOpen:                       &v1alpha1.WhileOpenSpec{FallbackPolicy: &v1alpha1.FallbackPolicy{Kind: v1alpha1.ValidatingAdmissionPolicy, Name: name}},
			Probe: v1alpha1.ProbeSpec{Interval: &metav1.Duration{Duration: 100 * time.Millisecond}, Timeout: &metav1.Duration{Duration: 50 * time.Millisecond},
				FailureThreshold: 2, SuccessThreshold: 2},
		}}
	if err := env.Client.Create(ctx, wcb); err != nil {
		t.Fatal(err)
	}
	proxy := startHoldingProxy(t, env)
	kubeconfig := proxy.kubeconfig(t)
	flags := []string{"--leader-elect=false"}
	p := startController(t, kubeconfig, "initial", flags...)
	adopted := func(ctx context.Context) (bool, error) {
		var got v1alpha1.WebhookCircuitBreaker
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &got); err != nil {
			return false, err
		}
		f := got.Status.Floor
		return got.Status.State == v1alpha1.StateClosed && f != nil && !f.Armed, fmt.Errorf("state %s floor %+v", got.Status.State, f)
	}
	eventually(t, 30*time.Second, "the policy adopted, inert, the circuit closed", adopted)

	restarts := 0
	// killBetween holds the step's second write, kills the controller while
	// it waits for it, checks what the first write left, restarts the
	// controller and waits for the step to finish.
	killBetween := func(cycle int, what string, second func(*http.Request) bool, done func(open, armed bool) bool) {
		t.Helper()
		held := proxy.holdNext(second)
		select {
		case <-held:
		case <-time.After(30 * time.Second):
			t.Fatalf("cycle %d: %s: the second write was never made", cycle, what)
		}
		p.kill()
		restarts++
		// What the API server holds now, read fresh: the first write only.
		var c admissionregistrationv1.ValidatingWebhookConfiguration
		var pl admissionregistrationv1.ValidatingAdmissionPolicy
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &c); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &pl); err != nil {
			t.Fatal(err)
		}
		_, open := c.Annotations[circuit.AnnotationKey(floorWebhook)]
		armed := !strings.Contains(mustJSON(pl.Spec.MatchConditions), floor.MatchConditionName)
		if open || !armed {
			t.Fatalf("cycle %d: killed %s between the writes: webhook open %v, floor armed %v; want closed and armed", cycle, what, open, armed)
		}
		p = startController(t, kubeconfig, fmt.Sprintf("restart-%d", restarts), flags...)
		eventually(t, 30*time.Second, fmt.Sprintf("cycle %d: %s, converged", cycle, what), func(context.Context) (bool, error) {
			o, a := tl.now()
			return done(o, a), fmt.Errorf("open %v armed %v", o, a)
		})
	}
	for cycle := range 10 {
		start := time.Now()
		hook.SetDelay(2 * time.Second)
		killBetween(cycle, "opening", patchOf("validatingwebhookconfigurations", name), func(o, a bool) bool { return o && a })
		hook.SetDelay(0)
		killBetween(cycle, "closing", patchOf("validatingadmissionpolicies", name), func(o, a bool) bool { return !o && !a })
		t.Logf("cycle %d: opened and closed, killed between the two writes of each, %s", cycle, time.Since(start).Round(100*time.Millisecond))
	}
	if bad := tl.looser(); len(bad) > 0 {
		t.Fatalf("the webhook was open with its floor inert at revisions %v", bad)
	}

	if err := env.Client.Delete(ctx, wcb); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the breaker released and gone", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &v1alpha1.WebhookCircuitBreaker{})
		return client.IgnoreNotFound(err) == nil && err != nil, err
	})
	if got := snapshot(); got != original {
		t.Fatalf("after the breaker is deleted:\n%s\nwant\n%s", got, original)
	}
	if strings.Contains(original, floor.AnnotationKey) {
		t.Fatal("the original snapshot holds a record")
	}
}
