package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/hack/cluster"
	"github.com/tripswitch-dev/tripswitch/internal/demo"
)

// starved is how many healthy breakers the CPU-limited controller holds.
const starved = 100

func starveNames() []any {
	names := make([]any, starved)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%03d", starveHook, i)
	}
	return names
}

// testCPULimit: the chart with resources.limits.cpu 100m, so the kubelet
// sets a CFS quota on the container's cgroup, and 100 breakers of healthy
// webhooks. None may open: a probe timeout the controller caused by being
// throttled is no evidence. The throttling the controller reports
// (tripswitch_controller_cpu_throttled_seconds_total) is read from its own
// cgroup, from inside the container.
func testCPULimit(t *testing.T) {
	names := starveNames()
	approved := append([]any{demo.Configuration, probeHook, failoverHook, remediateHook, lifecycleHook}, names...)
	limited := map[string]any{
		"approvedWebhookConfigurations": map[string]any{"mutating": approved},
		"resources": map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "64Mi"},
			"limits": map[string]any{"cpu": "100m", "memory": "512Mi"}},
	}
	// The next install or upgrade (the next test's) renders the chart's
	// defaults again.
	installTripswitch(t, limited)
	checkQuota(t)

	hook := deployWebhook(t, "starve-webhook", "hook")
	for _, n := range names {
		hook.configuration(t, n.(string), "configmaps", "tripswitch.test/never")
		breaker(t, n.(string), v1alpha1.OpenActionIgnore, v1alpha1.ProbeSpec{})
	}
	eventually(t, 3*time.Minute, fmt.Sprintf("%d breakers Closed", starved), func(ctx context.Context) (bool, error) {
		closed, _, err := starveCensus(ctx)
		return closed == starved, fmt.Errorf("%d Closed (%v)", closed, err)
	})
	const hold = 90 * time.Second
	starvedSeen := map[string]bool{}
	for end := time.Now().Add(hold); time.Now().Before(end); time.Sleep(2 * time.Second) {
		_, s, err := starveCensus(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range s {
			starvedSeen[n] = true
		}
	}
	var list v1alpha1.WebhookCircuitBreakerList
	if err := env.client.List(t.Context(), &list); err != nil {
		t.Fatal(err)
	}
	opens := 0
	for _, b := range list.Items {
		if strings.HasPrefix(b.Name, starveHook) && (b.Status.State != v1alpha1.StateClosed || len(b.Status.History) > 0) {
			opens++
			t.Errorf("breaker %s of a healthy webhook opened (state %s, %d windows)", b.Name, b.Status.State, len(b.Status.History))
		}
	}
	throttled := throttledSeconds(t)
	t.Logf("%d breakers at limits.cpu 100m for %v: %d opened; ControllerStarved on %d; throttled per Pod: %v", starved, hold, opens, len(starvedSeen), throttled)
	// At 100m the lease may be changing hands when the hold ends.
	var lead string
	eventually(t, time.Minute, "a leader", func(ctx context.Context) (bool, error) {
		var err error
		lead, err = leader(ctx)
		return err == nil, err
	})
	if throttled[lead] <= 0 {
		t.Errorf("the leader %s reports %v s throttled: its container's cgroup cpu.stat was not read (the kernel throttled it: see the quota check)", lead, throttled[lead])
	}
}

// starveCensus counts the starve breakers Closed and names those whose
// ControllerStarved condition is True.
func starveCensus(ctx context.Context) (closed int, starvedNow []string, err error) {
	var list v1alpha1.WebhookCircuitBreakerList
	if err := env.client.List(ctx, &list); err != nil {
		return 0, nil, err
	}
	for _, b := range list.Items {
		if !strings.HasPrefix(b.Name, starveHook) {
			continue
		}
		if b.Status.State == v1alpha1.StateClosed {
			closed++
		}
		if meta.IsStatusConditionTrue(b.Status.Conditions, "ControllerStarved") {
			starvedNow = append(starvedNow, b.Name)
		}
	}
	return closed, starvedNow, nil
}

// checkQuota reads, on the host, the CFS quota the kubelet gave each
// controller container: 100m is 10 ms per 100 ms period.
func checkQuota(t testing.TB) {
	t.Helper()
	pods, err := controllerPods(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		dir := containerCgroup(t, p)
		b, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
		if err != nil {
			t.Fatalf("the quota of %s: %v", p.Name, err)
		}
		if q := strings.TrimSpace(string(b)); q != "10000" {
			t.Fatalf("%s: cpu.cfs_quota_us %s, want 10000 (limits.cpu 100m)", p.Name, q)
		}
	}
}

// containerCgroup finds the manager container's cgroup in the host's cpu
// hierarchy, under the kubelet's cgroupRoot.
func containerCgroup(t testing.TB, p corev1.Pod) string {
	t.Helper()
	var id string
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "manager" {
			_, id, _ = strings.Cut(cs.ContainerID, "://")
		}
	}
	var found string
	root := filepath.Join("/sys/fs/cgroup/cpu", cluster.CgroupParent)
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && id != "" && filepath.Base(path) == id {
			found = path
		}
		return nil
	})
	if found == "" {
		t.Fatalf("no cgroup for container %q of %s under %s", id, p.Name, root)
	}
	return found
}

// throttledSeconds scrapes each controller Pod directly (its own address)
// for the throttling it read from its cgroup.
func throttledSeconds(t testing.TB) map[string]float64 {
	t.Helper()
	token := metricsReaderToken(t)
	pods, err := controllerPods(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, p := range pods {
		_, body := scrape(t, "https://"+net.JoinHostPort(p.Status.PodIP, "8443")+"/metrics", token)
		got[p.Name] = metricValue(body, "tripswitch_controller_cpu_throttled_seconds_total")
	}
	return got
}

// metricValue is an unlabelled sample's value in a Prometheus text page, or
// -1 when it is missing.
func metricValue(page, name string) float64 {
	sc := bufio.NewScanner(strings.NewReader(page))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}
