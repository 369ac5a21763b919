package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// certValidity bounds every certificate; a cluster is brought up for a test
// run or an afternoon of trying, and `make cluster` makes a new PKI each time.
const certValidity = 30 * 24 * time.Hour

// identity is a client certificate's subject: the user and groups the API
// server authenticates it as.
type identity struct {
	file   string
	user   string
	groups []string
}

// clients are the cluster's components and its administrator, as the API
// server's default RBAC names them.
var clients = []identity{
	{file: "admin", user: "kubernetes-admin", groups: []string{"system:masters"}},
	{file: "controller-manager", user: "system:kube-controller-manager"},
	{file: "scheduler", user: "system:kube-scheduler"},
	{file: "kubelet", user: "system:node:" + NodeName, groups: []string{"system:nodes"}},
	{file: "kube-proxy", user: "system:kube-proxy"},
	// The API server's identity toward the kubelet (logs, exec).
	{file: "apiserver-kubelet-client", user: "kube-apiserver-kubelet-client", groups: []string{"system:masters"}},
}

// writePKI makes a CA, the API server's serving certificate, a client
// certificate and kubeconfig for each of clients, and the ServiceAccount
// token signing key, under Data/pki and Data.
func writePKI(l Layout) error {
	if err := os.MkdirAll(l.pki(""), 0o700); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("pki: CA key: %w", err)
	}
	caTmpl := certTemplate(pkix.Name{CommonName: "tripswitch-cluster-ca"})
	caTmpl.IsCA, caTmpl.BasicConstraintsValid = true, true
	caTmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("pki: sign CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writeCertKey(l.pki("ca"), caDER, caKey); err != nil {
		return err
	}

	serving := certTemplate(pkix.Name{CommonName: "kube-apiserver"})
	serving.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	serving.DNSNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + ClusterDomain}
	serving.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), NodeIP.AsSlice(), KubernetesServiceIP.AsSlice()}
	if err := issue(l.pki("apiserver"), serving, ca, caKey); err != nil {
		return err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	for _, c := range clients {
		tmpl := certTemplate(pkix.Name{CommonName: c.user, Organization: c.groups})
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		if err := issue(l.pki(c.file), tmpl, ca, caKey); err != nil {
			return err
		}
		if err := writeKubeconfig(l, c.file, caPEM); err != nil {
			return err
		}
	}
	// ServiceAccount tokens: the API server signs with the private key and
	// verifies with it; the controller manager signs the legacy ones.
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("pki: service account key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(saKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(l.pki("sa.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	return os.WriteFile(l.pki("sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

func certTemplate(subject pkix.Name) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial, Subject: subject,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certValidity),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
}

// issue signs tmpl with the CA and writes <base>.crt and <base>.key.
func issue(base string, tmpl, ca *x509.Certificate, caKey crypto.Signer) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("pki: key for %s: %w", filepath.Base(base), err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("pki: sign %s: %w", filepath.Base(base), err)
	}
	return writeCertKey(base, der, key)
}

func writeCertKey(base string, der []byte, key *ecdsa.PrivateKey) error {
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := os.WriteFile(base+".key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}

// writeKubeconfig writes Data/<name>.kubeconfig: the API server on NodeIP,
// the CA, and the client certificate <name>.
func writeKubeconfig(l Layout, name string, caPEM []byte) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["tripswitch"] = &clientcmdapi.Cluster{Server: APIServerURL(), CertificateAuthorityData: caPEM}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificate: l.pki(name + ".crt"), ClientKey: l.pki(name + ".key")}
	cfg.Contexts["tripswitch"] = &clientcmdapi.Context{Cluster: "tripswitch", AuthInfo: name}
	cfg.CurrentContext = "tripswitch"
	if err := clientcmd.WriteToFile(*cfg, filepath.Join(l.Data, name+".kubeconfig")); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", name, err)
	}
	return nil
}

// APIServerURL is where the API server listens.
func APIServerURL() string {
	return "https://" + net.JoinHostPort(NodeIP.String(), fmt.Sprint(APIServerPort))
}

// WriteServingCert makes a CA and a serving certificate it signed for the
// Service name.namespace (its .svc and .svc.cluster.local names) into dir:
// ca.crt, ca.key, tls.crt, tls.key. For a webhook behind a Service: the
// Secret holds tls.crt and tls.key, the configuration's caBundle ca.crt.
func WriteServingCert(dir, name, namespace string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := certTemplate(pkix.Name{CommonName: name + "-ca"})
	caTmpl.IsCA, caTmpl.BasicConstraintsValid, caTmpl.KeyUsage = true, true, x509.KeyUsageCertSign|x509.KeyUsageDigitalSignature
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("serving certificate: CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writeCertKey(filepath.Join(dir, "ca"), caDER, caKey); err != nil {
		return err
	}
	host := name + "." + namespace + ".svc"
	tmpl := certTemplate(pkix.Name{CommonName: host})
	tmpl.DNSNames = []string{host, host + "." + ClusterDomain}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	return issue(filepath.Join(dir, "tls"), tmpl, ca, caKey)
}
