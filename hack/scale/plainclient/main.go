// Command plainclient is the baseline hack/scale's cost scenario measures
// the controller against: a plain Go program doing the controller's probes
// and nothing else. One goroutine per target with a ticker of its own, a
// GET (or a POST of an AdmissionReview, checked for its UID) through
// net/http with a context timeout, over kept-alive HTTP/1.1 TLS connections.
//
//	plainclient -targets FILE -ca FILE [-kind HTTPGet|AdmissionReview] [-interval 1s] [-timeout 250ms]
//
// FILE holds one URL per line, one line per probe loop (a URL may repeat).
// On SIGUSR1 it prints "probes=N healthy=M goroutines=G alloc=BYTES".
package main

import (
	"bufio"
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	targets := flag.String("targets", "", "file of URLs, one probe loop per line")
	caFile := flag.String("ca", "", "PEM file of the CA the servers' certificates are signed by")
	kind := flag.String("kind", "HTTPGet", "HTTPGet or AdmissionReview")
	interval := flag.Duration("interval", time.Second, "probe interval")
	timeout := flag.Duration("timeout", 250*time.Millisecond, "probe timeout")
	flag.Parse()
	urls, err := readLines(*targets)
	if err != nil {
		fail(err)
	}
	caPEM, err := os.ReadFile(*caFile)
	if err != nil {
		fail(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		fail(fmt.Errorf("%s holds no certificate", *caFile))
	}
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1
		MaxIdleConnsPerHost: 4,                                                      // a server's four loops keep a connection each
		MaxIdleConns:        len(urls) * 2,
		IdleConnTimeout:     90 * time.Second,
	}}
	var probes, healthy atomic.Int64
	probe := get
	if *kind == "AdmissionReview" {
		probe = review
	}
	for _, u := range urls {
		go func() {
			time.Sleep(rand.N(*interval)) // spread the loops over an interval
			// The first probe may take its time: it opens the connection
			// the steady state keeps (a thousand handshakes at once on a
			// busy machine outlast a probe's timeout, and a timeout closes
			// the connection, so they would be paid again and again).
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			probe(ctx, client, u)
			cancel()
			t := time.NewTicker(*interval)
			for range t.C {
				ctx, cancel := context.WithTimeout(context.Background(), *timeout)
				if probe(ctx, client, u) {
					healthy.Add(1)
				}
				cancel()
				probes.Add(1)
			}
		}()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	for range sig {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Printf("probes=%d healthy=%d goroutines=%d alloc=%d\n", probes.Load(), healthy.Load(), runtime.NumGoroutine(), ms.TotalAlloc)
	}
}

func get(ctx context.Context, c *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return err == nil && resp.StatusCode/100 == 2
}

// reviewBody is the controller's probe review, a dry-run CREATE of a
// ConfigMap, with its UID to fill in.
const reviewBody = `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":%q,` +
	`"kind":{"group":"","version":"v1","kind":"ConfigMap"},"resource":{"group":"","version":"v1","resource":"configmaps"},` +
	`"requestKind":{"group":"","version":"v1","kind":"ConfigMap"},"requestResource":{"group":"","version":"v1","resource":"configmaps"},` +
	`"name":"tripswitch-probe","namespace":"tripswitch-probe","operation":"CREATE","userInfo":{},` +
	`"object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"tripswitch-probe","namespace":"tripswitch-probe","annotations":{"tripswitch.dev/probe":"true"}}},` +
	`"oldObject":null,"dryRun":true,"options":{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1","dryRun":["All"]}}}`

func review(ctx context.Context, c *http.Client, url string) bool {
	var b [16]byte
	_, _ = crand.Read(b[:])
	uid := "plain-probe-" + hex.EncodeToString(b[:])
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(fmt.Sprintf(reviewBody, uid)))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode/100 != 2 {
		return false
	}
	var answer struct {
		Response *struct {
			UID string `json:"uid"`
		} `json:"response"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	return dec.Decode(&answer) == nil && answer.Response != nil && answer.Response.UID == uid
}

func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		if l := strings.TrimSpace(s.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out, s.Err()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "plainclient:", err)
	os.Exit(1)
}
