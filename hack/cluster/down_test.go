package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// What the kubelet, containerd and CNI write at paths fixed in their code,
// whatever the cluster's flags, is seen by Leftovers and removed by Down's
// removeFixedPaths, directories included once empty; what another kubelet
// wrote there is neither.
func TestFixedPathsAreSeenAndRemoved(t *testing.T) {
	dir := t.TempDir()
	l := Layout{Data: filepath.Join(dir, "data"), State: filepath.Join(dir, "state"), Root: filepath.Join(dir, "root")}
	write := func(path string, data []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The kubelet's serving certificate in its default --cert-dir.
	write(l.host(defaultKubeletCertDir+"/kubelet.crt"), selfSignedPEM(t, NodeName+"@1765000000"))
	write(l.host(defaultKubeletCertDir+"/kubelet.key"), []byte("key"))
	// Its device-plugin socket.
	if err := os.MkdirAll(filepath.Dir(l.host(devicePluginSocket)), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", l.host(devicePluginSocket))
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	// A log link into the cluster's Data, and an empty CNI results
	// directory beside one result of the cluster's network.
	if err := os.MkdirAll(l.host(containerLogLinks), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(l.Data+"/pod-logs/x/0.log", l.host(containerLogLinks+"/x.log")); err != nil {
		t.Fatal(err)
	}
	write(l.host(cniResults+"/"+cniNetwork+"-0123-eth0"), []byte("{}"))
	// kubectl's discovery cache of the cluster's API server.
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	discovery := l.host(filepath.Join(home, ".kube/cache/discovery/10.244.0.1_6443"))
	write(discovery+"/v1/serverresources.json", []byte("{}"))

	left := strings.Join(Leftovers(l), "\n")
	for _, want := range []string{
		"file " + l.host(defaultKubeletCertDir+"/kubelet.crt"), "file " + l.host(defaultKubeletCertDir+"/kubelet.key"),
		"file " + l.host(devicePluginSocket), "file " + l.host(containerLogLinks+"/x.log"),
		"file " + l.host(cniResults+"/"+cniNetwork+"-0123-eth0"), "file " + discovery,
	} {
		if !strings.Contains(left, want) {
			t.Errorf("Leftovers does not list %q; it lists:\n%s", want, left)
		}
	}

	if err := removeFixedPaths(l); err != nil {
		t.Fatal(err)
	}
	if left := hostLeftovers(l); len(left) > 0 {
		t.Errorf("after removeFixedPaths, Leftovers still lists:\n%s", strings.Join(left, "\n"))
	}
	for _, d := range []string{"/var/lib/kubelet", "/var/log/containers", "/var/lib/cni"} {
		if _, err := os.Stat(l.host(d)); err == nil {
			t.Errorf("%s is still there", l.host(d))
		}
	}

	// Another kubelet's certificate, and a file of another CNI network,
	// are not the cluster's: listed by neither, kept by Down.
	other := l.host(defaultKubeletCertDir + "/kubelet.crt")
	write(other, selfSignedPEM(t, "worker-7@1765000000"))
	foreign := l.host(cniResults + "/other-net-1-eth0")
	write(foreign, []byte("{}"))
	if left := hostLeftovers(l); len(left) > 0 {
		t.Errorf("Leftovers lists files that are not the cluster's:\n%s", strings.Join(left, "\n"))
	}
	if err := removeFixedPaths(l); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{other, foreign} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("Down removed %s, which is not the cluster's: %v", p, err)
		}
	}
}

// An empty directory at a fixed path is a leftover: the cluster made it.
func TestEmptyFixedDirectoryIsALeftover(t *testing.T) {
	dir := t.TempDir()
	l := Layout{Data: filepath.Join(dir, "data"), State: filepath.Join(dir, "state"), Root: filepath.Join(dir, "root")}
	if err := os.MkdirAll(l.host(cniResults), 0o755); err != nil {
		t.Fatal(err)
	}
	left := hostLeftovers(l)
	if !slices.Contains(left, "empty directory "+l.host(cniResults)) {
		t.Errorf("Leftovers: %v, want the empty %s", left, l.host(cniResults))
	}
}

// The kubelet keeps its serving certificate under the cluster's Data.
func TestKubeletCertDirIsTheClusters(t *testing.T) {
	l := Layout{Data: "/d", State: "/s", Cache: "/c"}
	for _, c := range node(l) {
		if c.name != "kubelet" {
			continue
		}
		for _, a := range c.args {
			if v, ok := strings.CutPrefix(a, "--cert-dir="); ok && strings.HasPrefix(v, l.Data+"/") {
				return
			}
		}
		t.Fatalf("kubelet %v: no --cert-dir under %s, so it writes its key to %s", c.args, l.Data, defaultKubeletCertDir)
	}
	t.Fatal("no kubelet among the node's components")
}

// hostLeftovers is Leftovers restricted to the paths under l.Root.
func hostLeftovers(l Layout) []string {
	var out []string
	for _, s := range Leftovers(l) {
		if strings.Contains(s, l.Root) {
			out = append(out, s)
		}
	}
	return out
}

func selfSignedPEM(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
