package remediate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/audit"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/defaulthook"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
	"github.com/tripswitch-dev/tripswitch/internal/remediate"
)

var (
	env      *testenv.Env
	hook     *defaulthook.Server
	started  sync.Once
	startErr error
)

// One control plane and one webhook for the package, started by the first
// test that needs them (so that fuzzing the pure functions starts none);
// each test works in a namespace of its own, which the webhook's
// namespaceSelector names.
func TestMain(m *testing.M) {
	code := m.Run()
	if hook != nil {
		_ = hook.Close()
	}
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

func start(t *testing.T) {
	t.Helper()
	started.Do(func() {
		if env, startErr = testenv.New(testenv.Options{}); startErr != nil {
			return
		}
		hook, startErr = defaulthook.Start()
	})
	if startErr != nil {
		t.Fatal(startErr)
	}
}

// bed is one test's namespace, the webhook as the audit sees it, and the
// window its objects were admitted in.
type bed struct {
	t      *testing.T
	ctx    context.Context
	c      client.Client
	ns     string
	wh     circuit.Webhook
	window audit.Window
}

// beds counts the beds made of each name: go test -count N makes each a
// namespace of its own on the package's one control plane.
var beds = map[string]int{}

// newBed makes a namespace named after name that the webhook (path /mutate
// or /validate) covers; create the window's objects, then call
// closeWindow.
func newBed(t *testing.T, name, path string) *bed {
	t.Helper()
	start(t)
	beds[name]++
	ns := name
	if n := beds[name]; n > 1 {
		ns = fmt.Sprintf("%s-%d", name, n)
	}
	b := &bed{t: t, ctx: t.Context(), c: env.Client, ns: ns}
	if err := b.c.Create(b.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"remediate-test": ns}}}); err != nil {
		t.Fatal(err)
	}
	kind := v1alpha1.MutatingWebhookConfiguration
	if path == "/validate" {
		kind = v1alpha1.ValidatingWebhookConfiguration
	}
	b.wh = circuit.Webhook{
		Configuration: "defaults", Name: "defaults.example.com", Kind: kind,
		ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.URL + path), CABundle: hook.CABundle},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps", "pods"}},
		}},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"remediate-test": ns}},
		SideEffects:       ptr.To(admissionregistrationv1.SideEffectClassNone),
		TimeoutSeconds:    ptr.To[int32](5),
		ReviewVersions:    []string{"v1"},
	}
	b.window.From = time.Now().Add(-2 * time.Second)
	return b
}

func (b *bed) closeWindow() { b.window.To = time.Now().Add(2 * time.Second) }

func (b *bed) create(o client.Object) {
	b.t.Helper()
	o.SetNamespace(b.ns)
	if err := b.c.Create(b.ctx, o); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bed) auditor(cfg *rest.Config) *audit.Auditor {
	b.t.Helper()
	a, err := audit.NewAuditor(cfg, 100, 100, &probe.HTTPProber{})
	if err != nil {
		b.t.Fatal(err)
	}
	return a
}

func (b *bed) audit() (*audit.Report, *audit.Auditor) {
	b.t.Helper()
	a := b.auditor(env.Config)
	r, err := a.Audit(b.ctx, b.wh, b.window)
	if err != nil {
		b.t.Fatal(err)
	}
	return r, a
}

func (b *bed) remediator(cfg *rest.Config, a *audit.Auditor, opts remediate.Options) *remediate.Remediator {
	b.t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	return &remediate.Remediator{Dynamic: dyn, Kube: kube, Auditor: a, Webhook: b.wh, Options: opts}
}

func outcomes(rep *remediate.Report) map[string]remediate.Outcome {
	out := map[string]remediate.Outcome{}
	for _, it := range rep.Items {
		out[it.Name] = it.Outcome
	}
	return out
}

func (b *bed) configMap(name string) *corev1.ConfigMap {
	b.t.Helper()
	var cm corev1.ConfigMap
	if err := b.c.Get(b.ctx, client.ObjectKey{Namespace: b.ns, Name: name}, &cm); err != nil {
		b.t.Fatal(err)
	}
	return &cm
}

// mutated is what the webhook makes of a ConfigMap's labels and data.
func mutated(t *testing.T, cm *corev1.ConfigMap) (map[string]string, map[string]string) {
	t.Helper()
	raw, _ := json.Marshal(cm)
	var obj map[string]any
	_ = json.Unmarshal(raw, &obj)
	var resp admissionv1.AdmissionResponse
	defaulthook.Mutate("ConfigMap", obj, &resp)
	labels, data := map[string]string{}, map[string]string{}
	for k, v := range cm.Labels {
		labels[k] = v
	}
	for k, v := range cm.Data {
		data[k] = v
	}
	var ops []struct {
		Path  string
		Value any
	}
	_ = json.Unmarshal(resp.Patch, &ops)
	for _, op := range ops {
		switch v := op.Value.(type) {
		case map[string]any:
			target := labels
			if op.Path == "/data" {
				target = data
			}
			for k, x := range v {
				target[k] = x.(string)
			}
		case string:
			if strings.HasPrefix(op.Path, "/data/") {
				data[strings.TrimPrefix(op.Path, "/data/")] = v
			} else {
				labels[strings.TrimPrefix(op.Path, "/metadata/labels/")] = v
			}
		}
	}
	return labels, data
}

// TestReapply: ConfigMaps admitted without the webhook. The dry run changes
// nothing; --apply makes each what the webhook would have made it, and
// patches nothing else; one edited after the audit is re-reviewed and keeps
// its edit; a second run finds nothing to do.
func TestReapply(t *testing.T) {
	b := newBed(t, "reapply", "/mutate")
	b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bare"}})
	b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "partial", Labels: map[string]string{defaulthook.InjectedLabel: "true", "app": "x"}}, Data: map[string]string{"other": "kept"}})
	b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "edited"}, Data: map[string]string{"other": "kept"}})
	b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "clean", Labels: map[string]string{defaulthook.InjectedLabel: "true"}}, Data: map[string]string{"mode": "custom"}})
	b.closeWindow()
	before := map[string]*corev1.ConfigMap{}
	for _, n := range []string{"bare", "partial", "edited", "clean"} {
		before[n] = b.configMap(n)
	}

	report, a := b.audit()
	if report.Counts[audit.WouldMutate] != 3 || report.Counts[audit.NoObjection] != 1 {
		t.Fatalf("audit counts %v", report.Counts)
	}
	// Edited after the audit, by someone else: it sets the mode itself.
	edited := b.configMap("edited")
	edited.Data["mode"] = "custom"
	if err := b.c.Update(b.ctx, edited); err != nil {
		t.Fatal(err)
	}
	before["edited"] = b.configMap("edited")

	t.Run("a dry run changes nothing and says what the API server would accept", func(t *testing.T) {
		rep, err := b.remediator(env.Config, a, remediate.Options{}).Run(b.ctx, report)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]remediate.Outcome{"bare": remediate.WouldRemediate, "partial": remediate.WouldRemediate, "edited": remediate.WouldRemediate}
		if got := outcomes(rep); !reflect.DeepEqual(got, want) || !rep.DryRun {
			t.Fatalf("outcomes %v, want %v", got, want)
		}
		for n, cm := range before {
			if now := b.configMap(n); now.ResourceVersion != cm.ResourceVersion {
				t.Errorf("%s changed in a dry run", n)
			}
		}
	})

	// The dry run re-reviewed "edited": audit again for the real run, as the command does.
	report, a = b.audit()
	edited = b.configMap("edited")
	edited.Labels = map[string]string{"edited": "again"}
	if err := b.c.Update(b.ctx, edited); err != nil {
		t.Fatal(err)
	}
	before["edited"] = b.configMap("edited")

	t.Run("apply makes each what the webhook would have made it, and nothing else", func(t *testing.T) {
		rep, err := b.remediator(env.Config, a, remediate.Options{Apply: true}).Run(b.ctx, report)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]remediate.Outcome{"bare": remediate.Remediated, "partial": remediate.Remediated, "edited": remediate.Remediated}
		if got := outcomes(rep); !reflect.DeepEqual(got, want) {
			t.Fatalf("outcomes %v, want %v\n%+v", got, want, rep.Items)
		}
		for n, cm := range before {
			wantLabels, wantData := mutated(t, cm)
			now := b.configMap(n)
			if !reflect.DeepEqual(map[string]string(now.Labels), wantLabels) || !reflect.DeepEqual(now.Data, wantData) {
				t.Errorf("%s: labels %v data %v, want %v %v (what the webhook makes of it as it is now)", n, now.Labels, now.Data, wantLabels, wantData)
			}
		}
		if e := b.configMap("edited"); e.Data["mode"] != "custom" || e.Labels["edited"] != "again" {
			t.Errorf("the edit after the audit was overwritten: %v %v", e.Labels, e.Data)
		}
		if c := b.configMap("clean"); c.ResourceVersion != before["clean"].ResourceVersion {
			t.Error("an object the webhook does not object to was written")
		}
	})

	t.Run("a second run finds nothing to do", func(t *testing.T) {
		report, a := b.audit()
		rep, err := b.remediator(env.Config, a, remediate.Options{Apply: true}).Run(b.ctx, report)
		if err != nil || len(rep.Items) != 0 || report.Counts[audit.NoObjection] != 4 {
			t.Fatalf("second run: %v, items %+v, audit %v", err, rep.Items, report.Counts)
		}
	})
}

// TestObjectedLabelledAndKept: objects a validating webhook objects to are
// listed by default, labelled with --label, never deleted; a second run
// finds them labelled already.
func TestObjectedLabelledAndKept(t *testing.T) {
	b := newBed(t, "objected", "/validate")
	b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bad", Labels: map[string]string{"policy": defaulthook.Forbidden}}})
	b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fine"}})
	b.closeWindow()
	report, a := b.audit()
	rep, err := b.remediator(env.Config, a, remediate.Options{Apply: true}).Run(b.ctx, report)
	if err != nil || fmt.Sprint(outcomes(rep)) != "map[bad:Listed]" || rep.Items[0].Message != defaulthook.Denial {
		t.Fatalf("without --label: %v %+v", err, rep.Items)
	}
	if _, ok := b.configMap("bad").Labels[remediate.LabelKey]; ok {
		t.Fatal("labelled without --label")
	}
	for i, want := range []remediate.Outcome{remediate.Labelled, remediate.Current} {
		report, a := b.audit()
		rep, err := b.remediator(env.Config, a, remediate.Options{Apply: true, Label: true}).Run(b.ctx, report)
		if err != nil || fmt.Sprint(outcomes(rep)) != fmt.Sprintf("map[bad:%s]", want) {
			t.Fatalf("run %d with --label: %v %+v", i+1, err, rep.Items)
		}
		if v := b.configMap("bad").Labels[remediate.LabelKey]; v != "defaults.example.com" {
			t.Fatalf("run %d: label %q", i+1, v)
		}
	}
	if _, ok := b.configMap("fine").Labels[remediate.LabelKey]; ok {
		t.Fatal("an object the webhook allows was labelled")
	}
}

// TestNotReviewedIsNeverActedOn: a webhook with side effects is never
// re-reviewed, so nothing is done to what it would mutate.
func TestNotReviewedIsNeverActedOn(t *testing.T) {
	b := newBed(t, "side-effects", "/mutate")
	b.wh.SideEffects = ptr.To(admissionregistrationv1.SideEffectClassSome)
	b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bare"}})
	b.closeWindow()
	rv := b.configMap("bare").ResourceVersion
	reviews := hook.Reviews.Load()
	report, a := b.audit()
	rep, err := b.remediator(env.Config, a, remediate.Options{Apply: true, Roll: true, Label: true}).Run(b.ctx, report)
	if err != nil || fmt.Sprint(outcomes(rep)) != "map[bare:Refused]" || !strings.Contains(rep.Items[0].Message, "side effects") {
		t.Fatalf("%v %+v", err, rep.Items)
	}
	if b.configMap("bare").ResourceVersion != rv || hook.Reviews.Load() != reviews {
		t.Fatal("an object not re-reviewed was changed, or the webhook was asked")
	}
}

// TestAuthorizationErrorStops: a user who may audit but not patch is
// stopped at the dry run, before anything changed, by an error naming the
// permission.
func TestAuthorizationErrorStops(t *testing.T) {
	b := newBed(t, "limited", "/mutate")
	b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}})
	b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b"}})
	b.closeWindow()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "audit-only-" + b.ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps", "pods", "namespaces"}, Verbs: []string{"get", "list"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "auditor", APIGroup: "rbac.authorization.k8s.io"}}}
	for _, o := range []client.Object{role, binding} {
		if err := b.c.Create(b.ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "auditor"}
	a := b.auditor(cfg)
	report, err := a.Audit(b.ctx, b.wh, b.window)
	if err != nil || report.Counts[audit.WouldMutate] != 2 {
		t.Fatalf("the audit as the limited user: %v %v", err, report)
	}
	rvs := []string{b.configMap("a").ResourceVersion, b.configMap("b").ResourceVersion}
	rep, err := b.remediator(cfg, a, remediate.Options{Apply: true}).Run(b.ctx, report)
	var authz *remediate.AuthorizationError
	if !errors.As(err, &authz) || authz.Verb != "patch" || authz.Resource != "configmaps" || authz.Namespace != b.ns {
		t.Fatalf("got %v, want an authorization error for patch on configmaps in %s", err, b.ns)
	}
	t.Logf("the error: %v", err)
	for _, want := range []string{"refused patch on configmaps in namespace " + b.ns, "remediation.resources", "config/remediation"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not say %q", err, want)
		}
	}
	if fmt.Sprint(outcomes(rep)) != "map[a:NotDone b:NotDone]" || rep.Stopped == "" {
		t.Errorf("outcomes %v, stopped %q", outcomes(rep), rep.Stopped)
	}
	if got := []string{b.configMap("a").ResourceVersion, b.configMap("b").ResourceVersion}; !reflect.DeepEqual(got, rvs) {
		t.Error("something changed before the authorization error stopped the run")
	}
}

// TestStoppedMidRunLeavesNothingHalfWritten: the breaker deleted after the
// first change (the Check fails): that object is fully repaired, the others
// untouched and NotDone; a later run repairs what is left.
func TestStoppedMidRunLeavesNothingHalfWritten(t *testing.T) {
	b := newBed(t, "stopped", "/mutate")
	for _, n := range []string{"one", "two", "three"} {
		b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	b.closeWindow()
	report, a := b.audit()
	r := b.remediator(env.Config, a, remediate.Options{Apply: true})
	checks := 0
	r.Check = func(context.Context) error {
		if checks++; checks > 1 {
			return errors.New("breaker defaults was deleted during the remediation")
		}
		return nil
	}
	rep, err := r.Run(b.ctx, report)
	if !remediate.IsStop(err) || fmt.Sprint(outcomes(rep)) != "map[one:Remediated three:NotDone two:NotDone]" {
		t.Fatalf("%v %v", err, outcomes(rep))
	}
	for n, repaired := range map[string]bool{"one": true, "two": false, "three": false} {
		cm := b.configMap(n)
		if got := cm.Labels[defaulthook.InjectedLabel] == "true" && cm.Data["mode"] == defaulthook.DefaultMode; got != repaired {
			t.Errorf("%s: repaired %v, want %v (labels %v data %v)", n, got, repaired, cm.Labels, cm.Data)
		}
		if !repaired && (len(cm.Labels) > 0 || len(cm.Data) > 0) {
			t.Errorf("%s half-written: %v %v", n, cm.Labels, cm.Data)
		}
	}
	report, a = b.audit()
	rep, err = b.remediator(env.Config, a, remediate.Options{Apply: true}).Run(b.ctx, report)
	if err != nil || fmt.Sprint(outcomes(rep)) != "map[three:Remediated two:Remediated]" {
		t.Fatalf("the run after: %v %v", err, outcomes(rep))
	}
}

// TestRollHonoursTheDisruptionBudget: three Pods of a ReplicaSet and a bare
// Pod, which the webhook would mutate, and a PodDisruptionBudget allowing
// one disruption. With no controller-manager, the test plays the
// disruption controller: it grants the next disruption only a while after
// each eviction. The Pods are evicted one at a time, in order, each after
// its budget allowed it (the others waited on 429s), even with three
// allowed at once; the bare Pod is untouched.
func TestRollHonoursTheDisruptionBudget(t *testing.T) {
	b := newBed(t, "roll", "/mutate")
	kube := kubernetes.NewForConfigOrDie(env.Config)
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.ReplicaSetSpec{
		Replicas: ptr.To[int32](3),
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/web:1"}}}},
	}}
	b.create(rs)
	mkPod := func(name string, owned bool) {
		app := "lonely"
		if owned {
			app = "web"
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/web:1"}}}}
		if owned {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}
		}
		b.create(p)
		// Running and ready, as a kubelet would say: a Pending Pod's eviction ignores budgets.
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if err := b.c.Status().Update(b.ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"web-a", "web-b", "web-c"} {
		mkPod(n, true)
	}
	mkPod("lonely", false)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: policyv1.PodDisruptionBudgetSpec{
		MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	b.create(pdb)
	allow := func(n int32) {
		t.Helper()
		err := retryConflict(func() error {
			var p policyv1.PodDisruptionBudget
			if err := b.c.Get(b.ctx, client.ObjectKeyFromObject(pdb), &p); err != nil {
				return err
			}
			p.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: p.Generation, DisruptionsAllowed: n, CurrentHealthy: 3, DesiredHealthy: 2, ExpectedPods: 3}
			return b.c.Status().Update(b.ctx, &p)
		})
		if err != nil {
			t.Error(err)
		}
	}
	allow(1)
	b.closeWindow()
	report, a := b.audit()
	if report.Counts[audit.WouldMutate] != 4 {
		t.Fatalf("audit %v", report.Counts)
	}

	// Watch the deletions; play the disruption controller: once the budget
	// is spent, grant one more after a pause.
	const pause = 400 * time.Millisecond
	w, err := kube.CoreV1().Pods(b.ns).Watch(b.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	type deletion struct {
		name string
		at   time.Time
	}
	var mu sync.Mutex
	var deleted []deletion
	var grants []time.Time
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Deleted {
				mu.Lock()
				deleted = append(deleted, deletion{p.Name, time.Now()})
				mu.Unlock()
			}
		}
	}()
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			var p policyv1.PodDisruptionBudget
			if err := b.c.Get(ctx, client.ObjectKeyFromObject(pdb), &p); err == nil && p.Status.DisruptionsAllowed == 0 {
				time.Sleep(pause)
				mu.Lock()
				grants = append(grants, time.Now())
				mu.Unlock()
				allow(1)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	r := b.remediator(env.Config, a, remediate.Options{Apply: true, Roll: true, MaxEvictions: 3,
		EvictionBackoff: 50 * time.Millisecond, MaxEvictionBackoff: 200 * time.Millisecond, EvictionTimeout: 30 * time.Second})
	start := time.Now()
	rep, err := r.Run(b.ctx, report)
	took := time.Since(start)
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]remediate.Outcome{"web-a": remediate.Rolled, "web-b": remediate.Rolled, "web-c": remediate.Rolled, "lonely": remediate.Refused}
	if got := outcomes(rep); !reflect.DeepEqual(got, want) {
		t.Fatalf("outcomes %v, want %v\n%+v", got, want, rep.Items)
	}
	time.Sleep(200 * time.Millisecond) // the watch's last event
	mu.Lock()
	defer mu.Unlock()
	var order []string
	for _, d := range deleted {
		order = append(order, d.name)
	}
	if fmt.Sprint(order) != "[web-a web-b web-c]" {
		t.Fatalf("deleted %v, want web-a, web-b, web-c in that order and never the bare Pod", order)
	}
	// Each eviction after the first came after a grant that followed the previous one.
	for i := 1; i < len(deleted); i++ {
		granted := false
		for _, g := range grants {
			if g.After(deleted[i-1].at) && !g.After(deleted[i].at) {
				granted = true
			}
		}
		if !granted {
			t.Errorf("%s was evicted %v after %s without a new disruption granted in between", deleted[i].name, deleted[i].at.Sub(deleted[i-1].at), deleted[i-1].name)
		}
	}
	for _, it := range rep.Items {
		if it.Name == "web-b" && !strings.Contains(it.Message, "refused") {
			t.Errorf("web-b: %q, want it to have waited on its budget", it.Message)
		}
		if it.Name == "lonely" && !strings.Contains(it.Message, "bare Pod") {
			t.Errorf("lonely: %q", it.Message)
		}
	}
	var lonely corev1.Pod
	if err := b.c.Get(b.ctx, client.ObjectKey{Namespace: b.ns, Name: "lonely"}, &lonely); err != nil {
		t.Fatalf("the bare Pod: %v", err)
	}
	t.Logf("3 Pods rolled in %v with a %v pause per disruption granted", took.Round(time.Millisecond), pause)
}

func retryConflict(f func() error) error {
	for i := 0; ; i++ {
		err := f()
		if !apierrors.IsConflict(err) || i == 5 {
			return err
		}
	}
}

// recorder keeps the events a remediation records, as "Kind/name Reason".
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) Eventf(regarding, _ runtime.Object, _, reason, _, _ string, _ ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o, _ := regarding.(client.Object)
	r.got = append(r.got, regarding.GetObjectKind().GroupVersionKind().Kind+"/"+o.GetName()+" "+reason)
}

func (r *recorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(slices.Values(r.got))
}

// register makes the bed's webhook a configuration the API server calls (a
// URL webhook for the bed's namespace, for ops), named after the test.
func (b *bed) register(path string, ops ...admissionregistrationv1.OperationType) {
	b.t.Helper()
	b.wh.Configuration, b.wh.Name = b.ns, b.ns+".example.com"
	b.wh.ClientConfig.URL = ptr.To(hook.URL + path)
	b.wh.Rules = slices.Clone(b.wh.Rules)
	b.wh.Rules[0].Operations = ops
	registerHook(b, b.wh)
}

// registerHook creates wh's configuration, removed when the test ends, and
// waits until the API server's admission calls it.
func registerHook(b *bed, wh circuit.Webhook) {
	b.t.Helper()
	var cfg client.Object
	if wh.Kind == v1alpha1.MutatingWebhookConfiguration {
		cfg = &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: wh.Configuration},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: wh.Name, ClientConfig: wh.ClientConfig, Rules: wh.Rules,
				NamespaceSelector: wh.NamespaceSelector, SideEffects: wh.SideEffects, TimeoutSeconds: wh.TimeoutSeconds, AdmissionReviewVersions: wh.ReviewVersions}}}
	} else {
		cfg = &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: wh.Configuration},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: wh.Name, ClientConfig: wh.ClientConfig, Rules: wh.Rules,
				NamespaceSelector: wh.NamespaceSelector, SideEffects: wh.SideEffects, TimeoutSeconds: wh.TimeoutSeconds, AdmissionReviewVersions: wh.ReviewVersions}}}
	}
	if err := b.c.Create(b.ctx, cfg); err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cfg) })
	for i := 0; ; i++ {
		n := hook.Reviews.Load()
		canary := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "canary-", Namespace: b.ns}}
		if err := b.c.Create(b.ctx, canary); err == nil {
			_ = b.c.Delete(b.ctx, canary)
		}
		if hook.Reviews.Load() > n {
			return
		}
		if i == 100 {
			b.t.Fatalf("the API server does not call webhook %s", wh.Name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// afterWindow waits until an object created now is outside the window:
// the audit widens it to the end of its last second, and a
// creationTimestamp is the start of its second.
func (b *bed) afterWindow() {
	time.Sleep(time.Until(b.window.To.Truncate(time.Second).Add(2 * time.Second)))
}

// TestWebhookThatIsNotIdempotentRepairedOnce: a webhook like the
// Kubernetes conformance suite's ConfigMap mutator, which adds
// mutation-stage-1 and, to a ConfigMap that has it, mutation-stage-2,
// registered for CREATE as the suite does. What the window admitted is
// repaired once: three runs remediate 2, 0 and 0 objects, each equal after
// every run to a twin created through the webhook (stage 1, never stage
// 2), with one event each, and a dry run after them has nothing to do. A
// patch that changes nothing (stage 2 added to a ConfigMap that has it) is
// no repair, and writes no event. A run from an audit made before the
// repair, whose resourceVersions are stale, finds the repair when it
// re-reads the object; a run after someone edited a repaired object leaves
// it as they made it.
func TestWebhookThatIsNotIdempotentRepairedOnce(t *testing.T) {
	b := newBed(t, "stages", "/stages")
	b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "empty"}})
	b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "some"}, Data: map[string]string{"other": "kept"}})
	both := map[string]string{defaulthook.Stage1: "yes", defaulthook.Stage2: "yes"}
	b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "both"}, Data: both})
	b.closeWindow()
	b.register("/stages", admissionregistrationv1.Create)
	b.afterWindow()
	b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "empty-twin"}})
	b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "some-twin"}, Data: map[string]string{"other": "kept"}})
	if d := b.configMap("empty-twin").Data; !reflect.DeepEqual(d, map[string]string{defaulthook.Stage1: "yes"}) {
		t.Fatalf("the webhook made a ConfigMap %v", d)
	}
	bothRV := b.configMap("both").ResourceVersion
	rec := &recorder{}
	run := func(report *audit.Report, a *audit.Auditor, apply bool) *remediate.Report {
		t.Helper()
		r := b.remediator(env.Config, a, remediate.Options{Apply: apply})
		r.Recorder = rec
		rep, err := r.Run(b.ctx, report)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	asTwins := func(when string) {
		t.Helper()
		for _, n := range []string{"empty", "some"} {
			got, twin := b.configMap(n), b.configMap(n+"-twin")
			if !reflect.DeepEqual(got.Data, twin.Data) || !reflect.DeepEqual(got.Labels, twin.Labels) {
				t.Errorf("%s: %s is %v %v, its twin through the webhook %v %v", when, n, got.Labels, got.Data, twin.Labels, twin.Data)
			}
		}
		if cm := b.configMap("both"); cm.ResourceVersion != bothRV || !reflect.DeepEqual(cm.Data, both) {
			t.Errorf("%s: a ConfigMap the webhook's patch does not change was written: %v", when, cm.Data)
		}
	}

	before, beforeAuditor := b.audit()
	if before.Counts[audit.WouldMutate] != 3 {
		t.Fatalf("audit %v", before.Counts)
	}
	dry := run(before, beforeAuditor, false)
	if got, want := outcomes(dry), map[string]remediate.Outcome{"empty": remediate.WouldRemediate, "some": remediate.WouldRemediate, "both": remediate.Current}; !reflect.DeepEqual(got, want) {
		t.Fatalf("dry run %v, want %v", got, want)
	}
	for i, want := range []int{2, 0, 0} {
		report, a := b.audit()
		rep := run(report, a, true)
		if rep.Counts[remediate.Remediated] != want || rep.Counts[remediate.Failed] != 0 || rep.Counts[remediate.Current] != 3-want {
			t.Fatalf("run %d: counts %v, want %d remediated\n%+v", i+1, rep.Counts, want, rep.Items)
		}
		for _, it := range rep.Items {
			if i > 0 && it.Name != "both" && !strings.Contains(it.Message, "already repaired in this window") {
				t.Errorf("run %d: %s %s %q, want it said to be repaired already", i+1, it.Name, it.Outcome, it.Message)
			}
			if it.Name == "both" && !strings.Contains(it.Message, "changes nothing") {
				t.Errorf("run %d: both %s %q", i+1, it.Outcome, it.Message)
			}
			if it.Outcome == remediate.Remediated && (it.ResourceVersion == "" || it.ResourceVersion != b.configMap(it.Name).ResourceVersion) {
				t.Errorf("run %d: %s reports resourceVersion %q written", i+1, it.Name, it.ResourceVersion)
			}
		}
		asTwins(fmt.Sprintf("after run %d", i+1))
	}
	report, a := b.audit()
	if got := outcomes(run(report, a, false)); !reflect.DeepEqual(got, map[string]remediate.Outcome{"empty": remediate.Current, "some": remediate.Current, "both": remediate.Current}) {
		t.Fatalf("a dry run after the repair: %v, want nothing to do", got)
	}
	stale := run(before, beforeAuditor, true)
	if got, want := outcomes(stale), map[string]remediate.Outcome{"empty": remediate.Current, "some": remediate.Current, "both": remediate.Current}; !reflect.DeepEqual(got, want) {
		t.Fatalf("a run from the audit before the repair: %v, want %v\n%+v", got, want, stale.Items)
	}
	asTwins("after a run from a stale audit")
	if got, want := rec.events(), []string{"ConfigMap/empty Remediated", "ConfigMap/some Remediated"}; !reflect.DeepEqual(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}

	// Edited after its repair: the edit is its author's, after the window,
	// and the object is not repaired again.
	some := b.configMap("some")
	some.Data["edited"] = "yes"
	if err := b.c.Update(b.ctx, some); err != nil {
		t.Fatal(err)
	}
	report, a = b.audit()
	if got := outcomes(run(report, a, true))["some"]; got != remediate.Current {
		t.Errorf("an object edited after its repair: %s", got)
	}
	if d := b.configMap("some").Data; !reflect.DeepEqual(d, map[string]string{"other": "kept", defaulthook.Stage1: "yes", "edited": "yes"}) {
		t.Errorf("an object edited after its repair is %v", d)
	}
}

// TestUpdateDeniedIsMarked: the recovered webhook denies any update of an
// object (a policy engine's validating webhook that reviews CREATE and
// UPDATE; a mutating webhook that freezes objects after creation), so the
// label and the re-applied patch cannot be written. The dry run says so;
// --apply marks the object with an event, counts it Marked (never Failed)
// and names it in the window's result; the object is left as it is. A
// denial by another webhook is the object's failure, as before.
func TestUpdateDeniedIsMarked(t *testing.T) {
	t.Run("a validating webhook that reviews updates denies the label", func(t *testing.T) {
		b := newBed(t, "strict", "/validate")
		b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bad", Labels: map[string]string{"policy": defaulthook.Forbidden}}})
		b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fine"}})
		b.closeWindow()
		b.register("/validate", admissionregistrationv1.Create, admissionregistrationv1.Update)
		rv := b.configMap("bad").ResourceVersion
		report, a := b.audit()
		dry, err := b.remediator(env.Config, a, remediate.Options{Label: true}).Run(b.ctx, report)
		if err != nil || fmt.Sprint(outcomes(dry)) != "map[bad:WouldMark]" || !strings.Contains(dry.Items[0].Message, fmt.Sprintf("admission webhook %q denied the request", b.wh.Name)) {
			t.Fatalf("dry run: %v %+v", err, dry.Items)
		}
		rec := &recorder{}
		r := b.remediator(env.Config, a, remediate.Options{Apply: true, Label: true})
		r.Recorder = rec
		rep, err := r.Run(b.ctx, report)
		if err != nil || fmt.Sprint(outcomes(rep)) != "map[bad:Marked]" || rep.Counts[remediate.Failed] != 0 {
			t.Fatalf("apply: %v %+v", err, rep.Items)
		}
		t.Logf("the item: %s", rep.Items[0].Message)
		if !strings.Contains(rep.Items[0].Message, "not labelled: the label "+remediate.LabelKey+" is an update") || !strings.Contains(rep.Items[0].Message, "AdmittedWithout event") {
			t.Errorf("the item does not say why it is not labelled: %q", rep.Items[0].Message)
		}
		if cm := b.configMap("bad"); cm.ResourceVersion != rv {
			t.Errorf("the object changed: %v", cm.Labels)
		}
		if got := rec.events(); !reflect.DeepEqual(got, []string{"ConfigMap/bad AdmittedWithout"}) {
			t.Errorf("events %v", got)
		}
		res := rep.Result("test", metav1.Now())
		if res.Marked != 1 || res.Failed != 0 || !reflect.DeepEqual(res.MarkedObjects, []string{"ConfigMap " + b.ns + "/bad"}) {
			t.Errorf("the window's result %+v", res)
		}
	})
	t.Run("a mutating webhook that denies the update that re-applies its patch", func(t *testing.T) {
		b := newBed(t, "locked", "/mutate-locked")
		b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "frozen", Labels: map[string]string{defaulthook.LockedLabel: "true"}}})
		b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "open"}})
		b.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "forbidden", Labels: map[string]string{"policy": defaulthook.Forbidden}}})
		b.closeWindow()
		b.register("/mutate-locked", admissionregistrationv1.Create, admissionregistrationv1.Update)
		// Another webhook, a policy that reviews updates: it denies "forbidden"'s.
		other := b.wh
		other.Kind, other.Configuration, other.Name = v1alpha1.ValidatingWebhookConfiguration, b.ns+"-policy", "other.example.com"
		other.ClientConfig.URL = ptr.To(hook.URL + "/validate")
		registerHook(b, other)
		frozen := b.configMap("frozen").ResourceVersion
		report, a := b.audit()
		if report.Counts[audit.WouldMutate] != 3 {
			t.Fatalf("audit %v", report.Counts)
		}
		dry, err := b.remediator(env.Config, a, remediate.Options{}).Run(b.ctx, report)
		if want := map[string]remediate.Outcome{"frozen": remediate.WouldMark, "open": remediate.WouldRemediate, "forbidden": remediate.Failed}; err != nil || !reflect.DeepEqual(outcomes(dry), want) {
			t.Fatalf("dry run: %v %v, want %v", err, outcomes(dry), want)
		}
		rec := &recorder{}
		r := b.remediator(env.Config, a, remediate.Options{Apply: true})
		r.Recorder = rec
		rep, err := r.Run(b.ctx, report)
		if want := map[string]remediate.Outcome{"frozen": remediate.Marked, "open": remediate.Remediated, "forbidden": remediate.Failed}; err != nil || !reflect.DeepEqual(outcomes(rep), want) {
			t.Fatalf("apply: %v %v, want %v\n%+v", err, outcomes(rep), want, rep.Items)
		}
		for _, it := range rep.Items {
			switch it.Name {
			case "frozen":
				if !strings.Contains(it.Message, defaulthook.Locked) || !strings.Contains(it.Message, "not repaired: the repair is an update") {
					t.Errorf("frozen: %q", it.Message)
				}
			case "forbidden":
				if !strings.Contains(it.Message, `admission webhook "other.example.com" denied the request`) {
					t.Errorf("forbidden: %q", it.Message)
				}
			}
		}
		if cm := b.configMap("frozen"); cm.ResourceVersion != frozen || cm.Annotations[remediate.RepairedKey] != "" {
			t.Errorf("the frozen object changed: %v %v", cm.Labels, cm.Annotations)
		}
		want := []string{"ConfigMap/forbidden RemediationFailed", "ConfigMap/frozen AdmittedWithout", "ConfigMap/open Remediated"}
		if got := rec.events(); !reflect.DeepEqual(got, want) {
			t.Errorf("events %v, want %v", got, want)
		}
	})
}
