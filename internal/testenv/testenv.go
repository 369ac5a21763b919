// Package testenv starts the real control plane (kube-apiserver and etcd, built
// from Go modules by `make tools`) through controller-runtime's envtest, for
// tests of everything the API server owns: patches, conflicts, defaulting,
// validation, RBAC and admission calls.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// KubeVersion is the control-plane version that `make tools` builds.
const KubeVersion = "v1.37.2"

const modulePath = "github.com/tripswitch-dev/tripswitch"

// Env is a running control plane and a client for it.
type Env struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is an uncached client with Scheme.
	Client client.Client
	// Scheme knows the built-in types and any the test asked for.
	Scheme *runtime.Scheme

	env *envtest.Environment
}

// Options adjusts the control plane a test starts.
type Options struct {
	// CRDs installs the repository's CustomResourceDefinitions from config/crd/bases.
	CRDs bool
	// APIServerFlags are set on kube-apiserver's command line (name without
	// dashes), for example admission-control-config-file.
	APIServerFlags map[string]string
	// AddToScheme registers further types with the client's scheme.
	AddToScheme []func(*runtime.Scheme) error
}

// Start starts a control plane for t and stops it when t ends. It fails the test
// with instructions when the binaries are missing; it never skips.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	env, err := New(opts)
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	return env
}

// New starts a control plane that the caller must Stop; for TestMain, where
// one control plane serves a whole package.
func New(opts Options) (*Env, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	assets, err := AssetsDir(root)
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme}, opts.AddToScheme...) {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("build scheme: %w", err)
		}
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, Scheme: scheme}
	if opts.CRDs {
		env.CRDDirectoryPaths = []string{filepath.Join(root, "config", "crd", "bases")}
		env.ErrorIfCRDPathMissing = true
	}
	for name, value := range opts.APIServerFlags {
		env.ControlPlane.GetAPIServer().Configure().Set(name, value)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("envtest with binaries from %s: %w", assets, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("create client: %w", err)
	}
	return &Env{Config: cfg, Client: c, Scheme: scheme, env: env}, nil
}

// Stop stops the control plane.
func (e *Env) Stop() error { return e.env.Stop() }

// AssetsDir returns the directory holding kube-apiserver and etcd:
// $KUBEBUILDER_ASSETS when set, else bin/k8s/<KubeVersion> under root.
func AssetsDir(root string) (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(root, "bin", "k8s", KubeVersion)
	}
	var missing []string
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(dir, bin)); err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, bin)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("%s not found in %s: run `make tools` (builds kube-apiserver %s and etcd from Go modules) or point KUBEBUILDER_ASSETS at them",
			strings.Join(missing, " and "), dir, KubeVersion)
	}
	return dir, nil
}

// RepoRoot finds the main module's root by walking up from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module "+modulePath+"\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: no go.mod for " + modulePath + " above the working directory")
		}
		dir = parent
	}
}

// UserConfig returns a rest.Config that authenticates as a new user with no
// groups beyond system:authenticated, so RBAC decides what it may do.
func (e *Env) UserConfig(name string) (*rest.Config, error) {
	u, err := e.env.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		return nil, fmt.Errorf("add user %s: %w", name, err)
	}
	return u.Config(), nil
}

// AdminKubeconfig returns a kubeconfig for a cluster administrator, for
// programs the test starts as separate processes.
func (e *Env) AdminKubeconfig() ([]byte, error) {
	u, err := e.env.AddUser(envtest.User{Name: "tripswitch-e2e-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("add admin user: %w", err)
	}
	return u.KubeConfig()
}

// SecondAPIServer starts another kube-apiserver on the same etcd, as in a
// control plane with several: it serves with the first one's certificate,
// trusts the same client CA and signs service account tokens with the same
// key and issuer, so any client of the first works against it. It stops when
// t ends; the result is its host:port on 127.0.0.1.
func (e *Env) SecondAPIServer(t testing.TB) string {
	t.Helper()
	first := e.env.ControlPlane.APIServer
	dir := t.TempDir()
	for _, f := range []string{"apiserver.crt", "apiserver.key", "sa-signer.crt", "sa-signer.key"} {
		data, err := os.ReadFile(filepath.Join(first.CertDir, f))
		if err != nil {
			t.Fatalf("second API server: copy %s: %v", f, err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
			t.Fatalf("second API server: %v", err)
		}
	}
	second := &envtest.APIServer{
		Path:          first.Path,
		EtcdURL:       first.EtcdURL,
		CertDir:       dir,
		SecureServing: envtest.SecureServing{Authn: first.SecureServing.Authn},
		StartTimeout:  first.StartTimeout,
		StopTimeout:   first.StopTimeout,
	}
	issuer := first.SecureServing.URL("https", "/").String()
	second.Configure().Set("service-account-issuer", issuer).Set("api-audiences", issuer)
	if err := second.Start(); err != nil {
		t.Fatalf("second API server: %v", err)
	}
	t.Cleanup(func() {
		if err := second.Stop(); err != nil {
			t.Errorf("stop second API server: %v", err)
		}
	})
	return second.SecureServing.HostPort()
}
