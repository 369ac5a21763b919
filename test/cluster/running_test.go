package cluster_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestCluster runs the claims in order on one cluster and one release:
// each subtest installs or upgrades the release as it needs, and the last
// uninstalls it.
func TestCluster(t *testing.T) {
	t.Run("Running", testRunning)
	t.Run("DelayedWebhook", testDelayedWebhook)
	t.Run("ServiceProbing", testServiceProbing)
	t.Run("Failover", testFailover)
	t.Run("Remediation", testRemediation)
	t.Run("CPULimit", testCPULimit)
	t.Run("HelmLifecycle", testHelmLifecycle)
	t.Run("ByHand", testByHand)
}

// testRunning: the chart's Deployment runs the release image as two Pods,
// both Ready, one leading; the metrics Service answers an anonymous scrape
// with 401 and a scrape with a token of a ServiceAccount bound to the
// metrics reader role with 200 and tripswitch's metrics.
func testRunning(t *testing.T) {
	installTripswitch(t, nil)
	ctx := t.Context()
	lead, err := leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := controllerPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if img := p.Spec.Containers[0].Image; img != imageRepository+":"+imageTag {
			t.Errorf("Pod %s runs %s, want the release image %s:%s", p.Name, img, imageRepository, imageTag)
		}
	}
	t.Logf("controller Pods %s and %s Ready; %s leads", pods[0].Name, pods[1].Name, lead)

	url := metricsURL(t)
	if code, _ := scrape(t, url, ""); code != http.StatusUnauthorized {
		t.Errorf("anonymous scrape of %s: %d, want 401", url, code)
	}
	code, body := scrape(t, url, metricsReaderToken(t))
	if code != http.StatusOK || !strings.Contains(body, "tripswitch_") {
		t.Errorf("scrape of %s with a metrics reader's token: %d, want 200 with tripswitch's metrics (%d bytes)", url, code, len(body))
	}
}

// metricsURL is the metrics Service's ClusterIP: kube-proxy's rules take the
// scrape from this host to one of the Pods.
func metricsURL(t testing.TB) string {
	t.Helper()
	svc, err := env.cs.CoreV1().Services(releaseNS).Get(t.Context(), release+"-metrics", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("https://%s/metrics", net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(svc.Spec.Ports[0].Port)))
}

// metricsReaderToken binds a ServiceAccount of its own to the chart's
// metrics reader ClusterRole and returns a token of it.
func metricsReaderToken(t testing.TB) string {
	t.Helper()
	ctx := t.Context()
	const ns, sa = "scraper", "prometheus"
	ensureNamespace(t, ns)
	if _, err := env.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scraper-metrics-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "tripswitch-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}
	if _, err := env.cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err == nil {
		t.Cleanup(func() { deleteAndWait(t, binding) })
	} else if !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// The controller asks the API server whether a scraper may GET /metrics
	// and keeps a refusal for 30 s: ask first, until the API server's RBAC
	// has seen the binding.
	eventually(t, 30*time.Second, "the API server allowing "+ns+"/"+sa+" GET /metrics", func(ctx context.Context) (bool, error) {
		r, err := env.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:                  "system:serviceaccount:" + ns + ":" + sa,
			Groups:                []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
		}}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return r.Status.Allowed, fmt.Errorf("not allowed: %s", r.Status.Reason)
	})
	tr, err := env.cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// scrape GETs url (the controller's serving certificate is its own
// self-signed one: not verified), with a bearer token unless it is "".
func scrape(t testing.TB, url, token string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed
	var code int
	var body string
	eventually(t, 30*time.Second, "a scrape of "+url, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		code, body = resp.StatusCode, string(b)
		return true, nil
	})
	return code, body
}
