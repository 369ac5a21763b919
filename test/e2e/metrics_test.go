package e2e_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// TestMetricsAreAuthenticatedAndAuthorized runs the controller with its
// default secured metrics: a scrape without a token is refused (401), one
// with a token whose ServiceAccount lacks the scraper role is forbidden
// (403), and one bound to config/rbac's tripswitch-metrics-reader works. With
// --metrics-secure=false the endpoint is plain HTTP, for local runs.
func TestMetricsAreAuthenticatedAndAuthorized(t *testing.T) {
	env := testenv.Start(t, testenv.Options{CRDs: true})
	ctx := t.Context()
	admin, err := env.AdminKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "admin")
	if err := os.WriteFile(kubeconfig, admin, 0o600); err != nil {
		t.Fatal(err)
	}

	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "metrics_reader.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var reader rbacv1.ClusterRole
	if err := yaml.Unmarshal(data, &reader); err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}}
	scraper := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "monitoring", Name: "prometheus"}}
	stranger := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "monitoring", Name: "stranger"}}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-tripswitch-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "monitoring", Name: "prometheus"}},
	}
	for _, o := range []client.Object{ns, scraper, stranger, &reader, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	token := func(sa string) string {
		tr, err := cs.CoreV1().ServiceAccounts("monitoring").CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token for %s: %v", sa, err)
		}
		return tr.Status.Token
	}

	secure := freeAddr(t)
	startController(t, kubeconfig, "secure-metrics", "--leader-elect=false", "--metrics-bind-address="+secure)
	url := "https://" + secure + "/metrics"
	if code, _ := scrape(t, ctx, url, ""); code != http.StatusUnauthorized {
		t.Fatalf("scrape without a token: %d, want 401", code)
	}
	if code, _ := scrape(t, ctx, url, token("stranger")); code != http.StatusForbidden {
		t.Fatalf("scrape with a token without the scraper role: %d, want 403", code)
	}
	code, body := scrape(t, ctx, url, token("prometheus"))
	if code != http.StatusOK || !strings.Contains(body, "controller_runtime_") {
		t.Fatalf("scrape as the scraper: %d, want 200 with metrics:\n%.300s", code, body)
	}

	plain := freeAddr(t)
	startController(t, kubeconfig, "plain-metrics", "--leader-elect=false", "--metrics-secure=false", "--metrics-bind-address="+plain)
	if code, body := scrape(t, ctx, "http://"+plain+"/metrics", ""); code != http.StatusOK || !strings.Contains(body, "controller_runtime_") {
		t.Fatalf("plain-HTTP scrape: %d", code)
	}
}

// freeAddr returns a 127.0.0.1 address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// scrape GETs url with an optional bearer token, waiting up to 60s for the
// endpoint to come up; it returns the status code and body.
func scrape(t *testing.T, ctx context.Context, url, token string) (int, string) {
	t.Helper()
	// The controller's certificate is self-signed; trust is not under test.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(body)
		}
		if time.Now().After(deadline) {
			t.Fatal(fmt.Errorf("metrics endpoint %s never answered: %w", url, err))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
