// Package deploy tests the install manifests: the kustomize tree under
// config/ and the Helm chart under charts/tripswitch, rendered with their own
// Go libraries and applied to a real kube-apiserver.
package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/loader"
	kubefake "helm.sh/helm/v4/pkg/kube/fake"
	"helm.sh/helm/v4/pkg/release"
	"helm.sh/helm/v4/pkg/storage"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/tripswitch-dev/tripswitch/hack/versions"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// The names config/default approves and the namespace it installs into.
const (
	namespace          = "tripswitch-system"
	serviceAccount     = "tripswitch"
	approvedMutating   = "example-mutating-webhook"
	approvedValidating = "example-validating-webhook"
	// The fallback policies config/rbac/fallback_policies.yaml approves.
	approvedMutatingFallback   = "example-mutating-fallback"
	approvedValidatingFallback = "example-validating-fallback"
)

func repoPath(t testing.TB, elem ...string) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(append([]string{root}, elem...)...)
}

// kustomizeBuild builds a kustomization with the kustomize Go API, as
// `kubectl apply -k` does.
func kustomizeBuild(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	return kustomizeBuildAt(t, repoPath(t, dir))
}

// overlay writes kustomization (its `resources:` may name config/... as
// {{config}}) into a temporary directory and builds it.
func overlay(t testing.TB, kustomization string) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, repoPath(t, "config"))
	if err != nil {
		t.Fatal(err)
	}
	k := strings.ReplaceAll(kustomization, "{{config}}", rel)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	return kustomizeBuildAt(t, dir)
}

func kustomizeBuildAt(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	opts := krusty.MakeDefaultOptions()
	res, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

// helmTemplate renders the chart with Helm's Go SDK, as `helm template
// --include-crds` does, for a release named tripswitch in namespace.
func helmTemplate(t testing.TB, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	return helmTemplateIn(t, namespace, values)
}

// helmTemplateIn renders the chart for a release in namespace ns.
func helmTemplateIn(t testing.TB, ns string, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	acc, err := helmRender(t, ns, values)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	return decode(t, []byte(acc.Manifest()))
}

// helmTemplateErr renders the chart and returns only its error.
func helmTemplateErr(t testing.TB, ns string, values map[string]any) error {
	t.Helper()
	_, err := helmRender(t, ns, values)
	return err
}

// helmNotes renders the chart and returns its NOTES.
func helmNotes(t testing.TB, values map[string]any) string {
	t.Helper()
	acc, err := helmRender(t, namespace, values)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	return acc.Notes()
}

func helmRender(t testing.TB, ns string, values map[string]any) (release.Accessor, error) {
	t.Helper()
	return helmRenderRelease(t, "tripswitch", ns, values)
}

// helmRenderRelease renders the chart for release name in namespace ns.
func helmRenderRelease(t testing.TB, name, ns string, values map[string]any) (release.Accessor, error) {
	t.Helper()
	chrt, err := loader.Load(repoPath(t, "charts", "tripswitch"))
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	cfg := action.NewConfiguration()
	cfg.Releases = storage.Init(driver.NewMemory())
	cfg.KubeClient = &kubefake.PrintingKubeClient{Out: io.Discard}
	install := action.NewInstall(cfg)
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName = name
	install.Namespace = ns
	install.Replace = true
	install.IncludeCRDs = true
	minor, err := versions.Minor(testenv.KubeVersion)
	if err != nil {
		return nil, err
	}
	install.KubeVersion = &common.KubeVersion{Version: testenv.KubeVersion, Major: "1", Minor: strconv.Itoa(minor)}
	rel, err := install.Run(chrt, values)
	if err != nil {
		return nil, err
	}
	return release.NewAccessor(rel)
}

func decode(t testing.TB, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decode manifests: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs
}

// key names an object in a manifest set.
func key(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s/%s %s/%s", o.GetAPIVersion(), o.GetKind(), o.GetNamespace(), o.GetName())
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func without(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	return slices.DeleteFunc(slices.Clone(objs), func(o *unstructured.Unstructured) bool { return o.GetKind() == kind })
}

// chartValues are the chart's values for the same install as config/default.
func chartValues() map[string]any {
	return map[string]any{
		"approvedWebhookConfigurations": map[string]any{
			"mutating":   []any{approvedMutating},
			"validating": []any{approvedValidating},
		},
		"approvedFallbackPolicies": map[string]any{
			"mutating":   []any{approvedMutatingFallback},
			"validating": []any{approvedValidatingFallback},
		},
	}
}

func username() string { return "system:serviceaccount:" + namespace + ":" + serviceAccount }
