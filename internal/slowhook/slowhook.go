// Package slowhook is an admission webhook for tests and the demo: it serves
// HTTPS on 127.0.0.1, admits every request after an adjustable delay, and
// records each AdmissionReview it answered. The same delay applies to
// /healthz, so a health prober sees the fault the API server sees.
package slowhook

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/internal/selfsigned"
)

// maxReviewBytes bounds a request body; real AdmissionReviews are far smaller.
const maxReviewBytes = 3 << 20

// Review is what the webhook saw of one admission request.
type Review struct {
	UID       string
	Operation string
	Kind      string
	Namespace string
	Name      string
	At        time.Time
}

// Server is a running webhook.
type Server struct {
	// CABundle is the PEM CA that signed the serving certificate.
	CABundle []byte
	// URL is the base URL, https://127.0.0.1:<port>.
	URL string

	srv *http.Server

	mu         sync.Mutex
	delay      time.Duration
	status     int
	denyPrefix string
	reviews    []Review
}

// Start serves the webhook on an ephemeral 127.0.0.1 port until Close.
func Start() (*Server, error) {
	ca, err := selfsigned.NewCA("slowhook-ca")
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
	s := &Server{CABundle: ca.PEM, URL: "https://" + ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("POST /mutate", s.admit)
	mux.HandleFunc("POST /validate", s.admit)
	s.srv = &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 5 * time.Second,
		// Clients that hang up mid-handshake (probes, tests) are expected here.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	go func() { _ = s.srv.ServeTLS(ln, "", "") }()
	return s, nil
}

// SetDelay makes every later response wait d first.
func (s *Server) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// SetStatus makes every later response an HTTP error with this status code;
// 0 restores normal answers.
func (s *Server) SetStatus(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = code
}

// SetDeny makes the webhook deny objects whose name starts with prefix, as
// a policy webhook would; "" admits everything again.
func (s *Server) SetDeny(prefix string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.denyPrefix = prefix
}

// Reviews returns the admission requests answered so far, oldest first.
func (s *Server) Reviews() []Review {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Review(nil), s.reviews...)
}

// Saw reports whether the webhook answered a review for the named object.
func (s *Server) Saw(namespace, name string) bool {
	for _, r := range s.Reviews() {
		if r.Namespace == namespace && r.Name == name {
			return true
		}
	}
	return false
}

// Close stops the server, cutting off requests still waiting on a delay.
func (s *Server) Close() error {
	if err := s.srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("close webhook server: %w", err)
	}
	return nil
}

// wait applies the configured delay; it returns the status to fail with, or 0.
func (s *Server) wait(ctx context.Context) int {
	s.mu.Lock()
	d, status := s.delay, s.status
	s.mu.Unlock()
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return status
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if code := s.wait(r.Context()); code != 0 {
		http.Error(w, http.StatusText(code), code)
		return
	}
	_, _ = w.Write([]byte("ok"))
}

func (s *Server) admit(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxReviewBytes)).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "body is not an AdmissionReview with a request", http.StatusBadRequest)
		return
	}
	if code := s.wait(r.Context()); code != 0 {
		http.Error(w, http.StatusText(code), code)
		return
	}
	req := review.Request
	s.mu.Lock()
	s.reviews = append(s.reviews, Review{
		UID: string(req.UID), Operation: string(req.Operation), Kind: req.Kind.Kind,
		Namespace: req.Namespace, Name: req.Name, At: time.Now(),
	})
	deny := s.denyPrefix
	s.mu.Unlock()
	answer := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if deny != "" && strings.HasPrefix(req.Name, deny) {
		answer.Allowed = false
		answer.Result = &metav1.Status{Code: http.StatusForbidden, Message: fmt.Sprintf("names starting with %q are not allowed", deny)}
	}
	resp := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: answer}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}
