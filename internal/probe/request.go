package probe

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"syscall"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/admission"
)

// A probe's request, built as the API server would call the webhook, and the
// judgement of the answer: a 5xx or a failed connection is an outage;
// anything that says the probe itself is wrong is Unknown, never down.

// maxBody bounds how much of a response is read.
const maxBody = 1 << 20

// unprobeable marks a configuration problem: the result is Unknown.
type unprobeable struct{ reason string }

func (u unprobeable) Error() string { return u.reason }

func cannot(format string, args ...any) error { return unprobeable{fmt.Sprintf(format, args...)} }

// locate is where a probe of t goes, as the API server would call the
// webhook: its URL, with the path the probe asks for (the health path for
// HTTPGet, the webhook's own for AdmissionReview), and the TLS server name.
func locate(t Target) (target, serverName string, err error) {
	cc := t.ClientConfig
	var path string
	switch {
	case cc.URL != nil && cc.Service != nil:
		return "", "", cannot("clientConfig sets both url and service")
	case cc.URL != nil:
		u, err := url.Parse(*cc.URL)
		if err != nil {
			return "", "", cannot("clientConfig.url is invalid: %v", err)
		}
		if u.Scheme != "https" {
			return "", "", cannot("clientConfig.url scheme %q is not https", u.Scheme)
		}
		if u.Hostname() == "" {
			return "", "", cannot("clientConfig.url has no host")
		}
		port := u.Port()
		if port == "" {
			port = "443"
		}
		serverName, path = u.Hostname(), u.Path
		target = "https://" + net.JoinHostPort(u.Hostname(), port)
	case cc.Service != nil:
		s := cc.Service
		if s.Name == "" || s.Namespace == "" {
			return "", "", cannot("clientConfig.service needs name and namespace")
		}
		port := int32(443)
		if s.Port != nil {
			port = *s.Port
		}
		if port < 1 || port > 65535 {
			return "", "", cannot("clientConfig.service.port %d is out of range", port)
		}
		serverName = s.Name + "." + s.Namespace + ".svc"
		target = "https://" + net.JoinHostPort(serverName, strconv.Itoa(int(port)))
		if s.Path != nil {
			path = *s.Path
		}
	default:
		return "", "", cannot("clientConfig has neither url nor service")
	}
	if t.Kind != v1alpha1.ProbeAdmissionReview {
		path = t.HealthPath
	}
	if path == "" {
		path = "/"
	}
	return target + path, serverName, nil
}

// newRequest builds t's probe request and returns its body (nil for a
// GET), which each attempt sends afresh (see exchange).
func newRequest(ctx context.Context, t Target, target, requester string) (*http.Request, []byte, types.UID, error) {
	if t.Kind != v1alpha1.ProbeAdmissionReview {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return nil, nil, "", cannot("build probe request: %v", err)
		}
		return req, nil, "", nil
	}
	body, uid, err := probeReview(t.ReviewVersions, requester).Encode()
	if err != nil {
		return nil, nil, "", cannot("%v", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, nil, "", cannot("build probe request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	// A dry-run review has no side effects: it may be sent again on a fresh
	// connection when a kept one turns out to be closed (see exchange).
	req.Header["Idempotency-Key"] = []string{string(uid)}
	return req, body, uid, nil
}

// probeReview is a dry-run CREATE of a ConfigMap that exists nowhere: a
// webhook must answer it without side effects (dryRun), and any well-formed
// answer, allowed or denied, proves the admission path works.
func probeReview(versions []string, requester string) admission.Review {
	return admission.Review{
		Versions:  versions,
		UIDPrefix: "tripswitch-probe-",
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		Name:      "tripswitch-probe",
		Namespace: "tripswitch-probe",
		Operation: admissionv1.Create,
		User:      requester,
		Object:    []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"tripswitch-probe","namespace":"tripswitch-probe","annotations":{"tripswitch.dev/probe":"true"}}}`),
	}
}

// judge turns an HTTP answer into a result. 5xx is an outage; other non-2xx
// answers say the probe itself is misconfigured (a wrong health path, an
// authenticating endpoint), which is not evidence the webhook is down.
func judge(t Target, uid types.UID, code int, body []byte) Result {
	switch {
	case code >= 500:
		return Result{Status: Unhealthy, Reason: "HTTP " + strconv.Itoa(code)}
	case code < 200 || code > 299:
		return Result{Status: Unknown, Reason: fmt.Sprintf("HTTP %d: the probe is misconfigured, not evidence of an outage", code)}
	case t.Kind != v1alpha1.ProbeAdmissionReview:
		return Result{Status: Healthy, Reason: "HTTP " + strconv.Itoa(code)}
	}
	if _, err := admission.Decode(body, uid); err != nil {
		return Result{Status: Unhealthy, Reason: "admission response: " + err.Error()}
	}
	return Result{Status: Healthy, Reason: "AdmissionReview answered"}
}

// classify names a transport failure precisely. Name resolution failures are
// Unknown: from tripswitch's vantage point the host does not exist, which is
// a configuration or network-view problem rather than a proven outage.
func classify(ctx context.Context, err error, timeout time.Duration) Result {
	var (
		dnsErr    *net.DNSError
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		certErr   x509.CertificateInvalidError
		recErr    tls.RecordHeaderError
		alertErr  tls.AlertError
		verErr    *tls.CertificateVerificationError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || ctx.Err() != nil:
		return Result{Status: Unhealthy, TimedOut: true, Reason: "timeout after " + timeout.String()}
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return Result{Status: Unknown, Reason: "host " + dnsErr.Name + " does not resolve from tripswitch (missing service?)"}
	case errors.Is(err, syscall.ECONNREFUSED):
		return Result{Status: Unhealthy, Reason: "connection refused"}
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return Result{Status: Unhealthy, Reason: "connection reset"}
	case errors.As(err, &unknownCA) || errors.As(err, &hostErr) || errors.As(err, &certErr) || errors.As(err, &verErr):
		return Result{Status: Unhealthy, Reason: "TLS: server certificate not trusted: " + tlsReason(err)}
	case errors.As(err, &recErr) || errors.As(err, &alertErr):
		return Result{Status: Unhealthy, Reason: "TLS handshake failed"}
	}
	return Result{Status: Unhealthy, Reason: "request failed: " + err.Error()}
}

func tlsReason(err error) string {
	var (
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
	)
	switch {
	case errors.As(err, &unknownCA):
		return "signed by an unknown authority"
	case errors.As(err, &hostErr):
		return "not valid for " + hostErr.Host
	}
	return "invalid certificate"
}
