package targetwatch_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
	"github.com/tripswitch-dev/tripswitch/internal/targetwatch"
)

func configuration(name string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "w.tripswitch.test", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:9/")},
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tripswitch.test/never": "true"}},
		}},
	}
}

// eventually waits for cond, failing with what after 30 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
	}
}

// TestWatchesFollowThroughEndsAndExpiry, on a real API server: a watch
// resumed from a version the API server no longer has (410 Gone) lists
// again and goes on; watches the API server ends (their timeoutSeconds)
// go on, and no change is missed across the ends (whether a watch resumes
// from its last version or lists again is not told apart here); each watch costs two goroutines (its own loop and
// HTTP/2's writer of its request), not client-go's reflector's four.
func TestWatchesFollowThroughEndsAndExpiry(t *testing.T) {
	// etcd compacts every second, and watches are served from etcd (the
	// watch cache answers a watch from a version it never held with the
	// current state, as ADDED events): resourceVersion 1 is soon gone.
	env := testenv.Start(t, testenv.Options{APIServerFlags: map[string]string{"etcd-compaction-interval": "1s", "watch-cache": "false"}})
	ctx := t.Context()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	api := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	const n = 20
	for i := range n {
		if _, err := api.Create(ctx, configuration(fmt.Sprintf("tf-%02d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	label := func(name, v string) string {
		t.Helper()
		cfg, err := api.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Labels = map[string]string{"edit": v}
		if cfg, err = api.Update(ctx, cfg, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return cfg.ResourceVersion
	}

	t.Run("resumed from an expired version", func(t *testing.T) {
		label("tf-01", "compacted")
		time.Sleep(3 * time.Second) // two compactions: what was before is gone
		old := kubernetes.NewForConfigOrDie(env.Config).AdmissionregistrationV1().ValidatingWebhookConfigurations()
		if w, err := old.Watch(ctx, metav1.ListOptions{ResourceVersion: "1"}); err == nil {
			ev := <-w.ResultChan()
			w.Stop()
			if ev.Type != "ERROR" {
				t.Fatalf("a watch from resourceVersion 1 after compaction began with %s, want the API server's 410 (the test needs it)", ev.Type)
			}
		} else if !strings.Contains(err.Error(), "too old") && !strings.Contains(err.Error(), "compacted") {
			t.Fatalf("a watch from resourceVersion 1 after compaction: %v", err)
		}
		targets := targetwatch.New(admin, func(string) {})
		see := targets.FollowFrom(ctx, v1alpha1.ValidatingWebhookConfiguration, "tf-00", "1")
		eventually(t, "a watch resumed at resourceVersion 1 never listed the configuration again", func() bool {
			_, found := see()
			return found
		})
		rv := label("tf-00", "after-expiry")
		eventually(t, "the change after the relist was never seen", func() bool {
			obj, _ := see()
			return obj.GetResourceVersion() == rv
		})
	})

	changes := make(chan string, 1000)
	targets := targetwatch.New(admin, func(b string) { changes <- b })
	targets.SetWatchTimeout(time.Second) // the API server ends each watch after 1-2 s
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	before := runtime.NumGoroutine()
	go func() { _ = targets.Start(runCtx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	for i := range n {
		targets.Get(fmt.Sprintf("b%02d", i), v1alpha1.ValidatingWebhookConfiguration, fmt.Sprintf("tf-%02d", i))
	}
	eventually(t, "the watches never listed", func() bool {
		for i := range n {
			if targets.Listing(v1alpha1.ValidatingWebhookConfiguration, fmt.Sprintf("tf-%02d", i)) {
				return false
			}
		}
		return true
	})
	time.Sleep(500 * time.Millisecond) // every watch request open
	if extra := runtime.NumGoroutine() - before; extra > 2*n+8 {
		t.Errorf("%d goroutines for %d watches, want two each (≤ %d with the runner and HTTP/2's connection)", extra, n, 2*n+8)
	}
	for round := range 3 {
		time.Sleep(2500 * time.Millisecond) // past every watch's end
		for len(changes) > 0 {
			<-changes
		}
		want := map[string]string{}
		for i := range n {
			want[fmt.Sprintf("tf-%02d", i)] = label(fmt.Sprintf("tf-%02d", i), fmt.Sprint(round))
		}
		eventually(t, fmt.Sprintf("round %d: a change made after the API server ended the watches was missed", round), func() bool {
			for i := range n {
				obj, found, cached := targets.Get(fmt.Sprintf("b%02d", i), v1alpha1.ValidatingWebhookConfiguration, fmt.Sprintf("tf-%02d", i))
				if !found || !cached || obj.GetResourceVersion() != want[fmt.Sprintf("tf-%02d", i)] {
					return false
				}
			}
			return true
		})
		heard := map[string]bool{}
		eventually(t, fmt.Sprintf("round %d: not every breaker heard of its configuration's change", round), func() bool {
			for len(changes) > 0 {
				heard[<-changes] = true
			}
			return len(heard) == n
		})
		for i := range n {
			if b := fmt.Sprintf("b%02d", i); !heard[b] {
				t.Fatalf("round %d: breaker %s did not hear of its configuration's change (heard: %v)", round, b, heard)
			}
		}
	}
}
