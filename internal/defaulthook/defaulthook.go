// Package defaulthook is a mutating and validating admission webhook for
// tests of remediation: it serves HTTPS on 127.0.0.1 with a certificate
// made at start.
//
// /mutate adds the label injected=true and a default to what lacks them:
// data.mode=default on a ConfigMap, spec.size=1 on any object with a spec
// that is not a Pod; a Pod gets the label only. /validate denies objects
// labelled policy=forbidden. Every answer is counted.
package defaulthook

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/internal/selfsigned"
)

// Labels and values the webhook sets.
const (
	InjectedLabel = "injected"
	DefaultMode   = "default"
	DefaultSize   = 1
	// Forbidden is the value of the label "policy" that /validate denies.
	Forbidden = "forbidden"
	// Denial is /validate's message.
	Denial = "policy=forbidden is not allowed here"
)

// Server is a running webhook.
type Server struct {
	// URL is the base URL, https://127.0.0.1:<port>; CABundle the PEM CA
	// that signed its certificate.
	URL      string
	CABundle []byte

	// Reviews counts the AdmissionReviews answered, DryRun those with dryRun set.
	Reviews, DryRun atomic.Int64

	srv *http.Server
}

// Start serves the webhook until Close.
func Start() (*Server, error) {
	ca, err := selfsigned.NewCA("defaulthook-ca")
	if err != nil {
		return nil, err
	}
	cert, err := ca.Issue("127.0.0.1")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	s := &Server{URL: "https://" + ln.Addr().String(), CABundle: ca.PEM}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /mutate", func(w http.ResponseWriter, r *http.Request) { s.answer(w, r, Mutate) })
	mux.HandleFunc("POST /validate", func(w http.ResponseWriter, r *http.Request) { s.answer(w, r, validate) })
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = s.srv.ServeTLS(ln, "", "") }()
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error {
	if err := s.srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("close webhook server: %w", err)
	}
	return nil
}

func (s *Server) answer(w http.ResponseWriter, r *http.Request, decide func(kind string, obj map[string]any, resp *admissionv1.AdmissionResponse)) {
	var review admissionv1.AdmissionReview
	body, _ := io.ReadAll(io.LimitReader(r.Body, 3<<20))
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	s.Reviews.Add(1)
	if review.Request.DryRun != nil && *review.Request.DryRun {
		s.DryRun.Add(1)
	}
	var obj map[string]any
	_ = json.Unmarshal(review.Request.Object.Raw, &obj)
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	decide(review.Request.Kind.Kind, obj, resp)
	review.Response, review.Request = resp, nil
	_ = json.NewEncoder(w).Encode(review)
}

// Mutate is the mutating webhook's decision, for tests that compute what
// it would make of an object.
func Mutate(kind string, obj map[string]any, resp *admissionv1.AdmissionResponse) {
	var ops []map[string]any
	md, _ := obj["metadata"].(map[string]any)
	labels, _ := md["labels"].(map[string]any)
	switch {
	case labels == nil:
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/labels", "value": map[string]string{InjectedLabel: "true"}})
	case labels[InjectedLabel] == nil:
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/labels/" + InjectedLabel, "value": "true"})
	}
	switch {
	case kind == "ConfigMap":
		data, _ := obj["data"].(map[string]any)
		if data == nil {
			ops = append(ops, map[string]any{"op": "add", "path": "/data", "value": map[string]string{"mode": DefaultMode}})
		} else if data["mode"] == nil {
			ops = append(ops, map[string]any{"op": "add", "path": "/data/mode", "value": DefaultMode})
		}
	case kind == "Pod":
	default:
		spec, _ := obj["spec"].(map[string]any)
		if spec == nil {
			ops = append(ops, map[string]any{"op": "add", "path": "/spec", "value": map[string]any{"size": DefaultSize}})
		} else if spec["size"] == nil {
			ops = append(ops, map[string]any{"op": "add", "path": "/spec/size", "value": DefaultSize})
		}
	}
	if len(ops) == 0 {
		return
	}
	resp.Patch, _ = json.Marshal(ops)
	pt := admissionv1.PatchTypeJSONPatch
	resp.PatchType = &pt
}

func validate(_ string, obj map[string]any, resp *admissionv1.AdmissionResponse) {
	md, _ := obj["metadata"].(map[string]any)
	labels, _ := md["labels"].(map[string]any)
	if labels["policy"] == Forbidden {
		resp.Allowed = false
		resp.Result = &metav1.Status{Message: Denial, Code: http.StatusForbidden}
	}
}
