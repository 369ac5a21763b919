package audit_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/internal/audit"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// TestAuditOf10000Objects: 10,000 matching ConfigMaps are listed in pages of
// 500 and re-reviewed, in a bounded number of API requests (the pages, the
// discovery, nothing per object) and at no more than the configured QPS.
func TestAuditOf10000Objects(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 10,000 objects")
	}
	const n, qps = 10_000, 5
	env := testenv.Start(t, testenv.Options{})
	ctx := t.Context()
	fast := rest.CopyConfig(env.Config)
	fast.QPS, fast.Burst = -1, 0 // creating the objects is not what is measured
	cs, err := kubernetes.NewForConfig(fast)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bulk"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	from := time.Now().Add(-time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "bulk", Name: fmt.Sprintf("cm-%05d", i), Labels: map[string]string{"bulk": "yes"}}}
				if _, err := cs.CoreV1().ConfigMaps("bulk").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	hook := startHook(t)
	wh := circuit.Webhook{
		Configuration: "bulk", Name: "bulk.example.com",
		ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.url + "/validate"), CABundle: hook.caBundle},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
		}},
		ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"bulk": "yes"}},
		SideEffects:    ptr.To(admissionregistrationv1.SideEffectClassNone),
		ReviewVersions: []string{"v1"},
	}
	a, err := audit.NewAuditor(env.Config, qps, qps, &probe.HTTPProber{})
	if err != nil {
		t.Fatal(err)
	}
	a.MaxObjects, a.Concurrency = n, 8
	start := time.Now()
	r, err := a.Audit(ctx, wh, audit.Window{From: from, To: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	requests := a.Requests()
	t.Logf("audit of %d objects (%d listed): %d API requests in %v (%.1f requests/s, limit %d), %d re-reviews",
		r.Found, r.Scanned, requests, took.Round(time.Millisecond), float64(requests)/took.Seconds(), qps, r.Counts[audit.NoObjection])
	if r.Found != n || r.Counts[audit.NoObjection] != n || r.Truncated {
		t.Fatalf("found %d, counts %v", r.Found, r.Counts)
	}
	// Pages: the ConfigMaps of every namespace, 500 at a time, plus the
	// test's warm-up objects; discovery a few requests; nothing per object.
	pages := int64((r.Scanned + 499) / 500)
	if requests > pages+10 {
		t.Fatalf("%d API requests for %d pages: the audit makes requests per object", requests, pages)
	}
	// The client's token bucket: after the first qps requests (the burst),
	// at most qps per second.
	if floor := time.Duration(float64(requests-qps) / qps * float64(time.Second)); took < floor-100*time.Millisecond {
		t.Fatalf("%d requests in %v: faster than %d per second", requests, took, qps)
	}
}
