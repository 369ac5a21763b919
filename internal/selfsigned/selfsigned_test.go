package selfsigned_test

import (
	"crypto/x509"
	"encoding/pem"
	"testing"

	"github.com/tripswitch-dev/tripswitch/internal/selfsigned"
)

func TestIssuedCertificateVerifiesAgainstCA(t *testing.T) {
	ca, err := selfsigned.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue("webhook.example.svc", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(ca.PEM)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("CA PEM does not hold a certificate: %q", ca.PEM)
	}
	for _, host := range []string{"webhook.example.svc", "127.0.0.1"} {
		if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: ca.Pool()}); err != nil {
			t.Errorf("verify for %s: %v", host, err)
		}
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: "other.svc", Roots: ca.Pool()}); err == nil {
		t.Error("certificate verified for a host it was not issued for")
	}
	other, err := selfsigned.NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: "127.0.0.1", Roots: other.Pool()}); err == nil {
		t.Error("certificate verified against an unrelated CA")
	}
}

func TestIssueWithoutHostsFails(t *testing.T) {
	ca, err := selfsigned.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Issue(); err == nil {
		t.Fatal("Issue() with no hosts succeeded")
	}
}
