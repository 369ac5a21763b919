// Command hookserver is the admission webhook the cluster tests run as a
// Deployment behind a Service: HTTPS on :8443 with the certificate mounted at
// /tls, /mutate answering with internal/fixtures/defaulthook's mutation (the label
// injected=true, and a default on ConfigMaps) and /healthz, both after an
// adjustable delay, as a slow or hung webhook would. A plain HTTP control port
// (:8080, reached on the Pod's own address) sets the delay: PUT /delay?d=2s;
// GET /reviews says how many AdmissionReviews it answered.
package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/tripswitch-dev/tripswitch/internal/fixtures/defaulthook"
)

type server struct {
	mu      sync.Mutex
	delay   time.Duration
	reviews atomic.Int64
}

func main() {
	cert, err := tls.LoadX509KeyPair("/tls/tls.crt", "/tls/tls.key")
	if err != nil {
		log.Fatalf("serving certificate: %v", err)
	}
	s := &server{}
	hooks := http.NewServeMux()
	hooks.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if s.wait(r) {
			_, _ = w.Write([]byte("ok"))
		}
	})
	hooks.HandleFunc("POST /mutate", s.mutate)
	control := http.NewServeMux()
	control.HandleFunc("PUT /delay", func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("d"))
		if err != nil {
			http.Error(w, "d: "+err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.delay = d
		s.mu.Unlock()
		fmt.Fprintf(w, "delay %s\n", d)
	})
	control.HandleFunc("GET /reviews", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, s.reviews.Load())
	})
	go func() {
		srv := &http.Server{Addr: ":8080", Handler: control, ReadHeaderTimeout: 5 * time.Second}
		log.Fatal(srv.ListenAndServe())
	}()
	srv := &http.Server{Addr: ":8443", Handler: hooks, ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ErrorLog:  log.New(io.Discard, "", 0)}
	fmt.Fprintln(os.Stderr, "hookserver: serving :8443 (webhook) and :8080 (control)")
	log.Fatal(srv.ListenAndServeTLS("", ""))
}

// wait applies the delay; false if the caller went away first.
func (s *server) wait(r *http.Request) bool {
	s.mu.Lock()
	d := s.delay
	s.mu.Unlock()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

func (s *server) mutate(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 3<<20)).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "body is not an AdmissionReview with a request", http.StatusBadRequest)
		return
	}
	if !s.wait(r) {
		return
	}
	s.reviews.Add(1)
	var obj map[string]any
	_ = json.Unmarshal(review.Request.Object.Raw, &obj)
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	defaulthook.Mutate(review.Request.Kind.Kind, obj, resp)
	review.Response, review.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}
