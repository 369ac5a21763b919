// Package release builds the release artifacts with hack/release, as
// `make release` does, and reads them back.
package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"helm.sh/helm/v4/pkg/chart/v2/loader"

	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

const version = "v0.0.0-test.1"

func release(t *testing.T, out string) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// hack/release is a module of its own (Helm, kustomize and
	// go-containerregistry stay out of the controller's module graph).
	cmd := exec.Command("go", "run", ".", "-version", version, "-out", out)
	cmd.Dir = filepath.Join(root, "hack", "release")
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1800000000")
	if data, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release: %v\n%s", err, data)
	}
}

// TestReleaseArtifacts: the image index holds both platforms, each a
// non-root image whose entrypoint is the binary, with the CA roots; the
// amd64 binary, taken out of its layer, prints the version; the chart and
// install.yaml name exactly that tag; SHA256SUMS matches every artifact;
// and a second build from the same inputs has the same index digest.
func TestReleaseArtifacts(t *testing.T) {
	out := t.TempDir()
	release(t, out)

	p, err := layout.FromPath(filepath.Join(out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	// The layout's index.json is the image index itself (what
	// `crane push --index` pushes).
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	digest, _ := idx.Digest()
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	revision := gitHead(t)
	wantLabels := map[string]string{
		"org.opencontainers.image.version": version, "org.opencontainers.image.revision": revision,
		"org.opencontainers.image.source": "https://github.com/tripswitch-dev/tripswitch", "org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.created": "2027-01-15T08:00:00Z",
	}
	for k, v := range wantLabels {
		if got := im.Annotations[k]; got != v {
			t.Errorf("index annotation %s = %q, want %q", k, got, v)
		}
	}
	platforms := map[string]bool{}
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s has no platform", d.Digest)
		}
		platforms[d.Platform.OS+"/"+d.Platform.Architecture] = true
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Config.User != "65532:65532" || strings.Join(cfg.Config.Entrypoint, " ") != "/tripswitch" ||
			cfg.OS != d.Platform.OS || cfg.Architecture != d.Platform.Architecture {
			t.Errorf("%s: user %q, entrypoint %v, platform %s/%s", d.Platform.Architecture, cfg.Config.User, cfg.Config.Entrypoint, cfg.OS, cfg.Architecture)
		}
		for k, v := range wantLabels {
			if got := cfg.Config.Labels[k]; got != v {
				t.Errorf("%s: label %s = %q, want %q", d.Platform.Architecture, k, got, v)
			}
		}
		files := layerFiles(t, img)
		checkImageSBOM(t, filepath.Join(out, "tripswitch-"+version+".linux-"+d.Platform.Architecture+".cdx.json"), files, revision)
		if !bytes.Contains(files["etc/ssl/certs/ca-certificates.crt"], []byte("BEGIN CERTIFICATE")) {
			t.Errorf("%s: no CA roots", d.Platform.Architecture)
		}
		for name := range files {
			if strings.HasPrefix(name, "bin/") || name == "bin/sh" {
				t.Errorf("%s: the image has %s", d.Platform.Architecture, name)
			}
		}
		if d.Platform.Architecture == runtime.GOARCH && runtime.GOOS == "linux" {
			bin := filepath.Join(t.TempDir(), "tripswitch")
			if err := os.WriteFile(bin, files["tripswitch"], 0o755); err != nil {
				t.Fatal(err)
			}
			got, err := exec.Command(bin, "--version").CombinedOutput()
			if err != nil || strings.TrimSpace(string(got)) != "tripswitch "+version {
				t.Errorf("the image's binary --version: %q (%v), want %q", got, err, "tripswitch "+version)
			}
			// The commit it was built from, as the go command stamps it.
			got, err = exec.Command("go", "version", "-m", bin).CombinedOutput()
			if err != nil || !strings.Contains(string(got), "\tbuild\tvcs.revision="+revision+"\n") ||
				strings.Contains(string(got), "(devel)") {
				t.Errorf("go version -m on the image's binary: want vcs.revision=%s and a module version, not (devel) (%v):\n%s", revision, err, got)
			}
		}
	}
	if !platforms["linux/amd64"] || !platforms["linux/arm64"] || len(platforms) != 2 {
		t.Errorf("platforms %v, want linux/amd64 and linux/arm64", platforms)
	}

	chrt, err := loader.Load(filepath.Join(out, "tripswitch-"+strings.TrimPrefix(version, "v")+".tgz"))
	if err != nil {
		t.Fatal(err)
	}
	if chrt.Metadata.AppVersion != version || chrt.Metadata.Version != strings.TrimPrefix(version, "v") {
		t.Errorf("chart version %s, appVersion %s", chrt.Metadata.Version, chrt.Metadata.AppVersion)
	}
	if tag := chrt.Values["image"].(map[string]any)["tag"]; tag != "" {
		t.Errorf("chart image.tag %v: the default must be the appVersion", tag)
	}
	install, err := os.ReadFile(filepath.Join(out, "install.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(install), "image: ghcr.io/tripswitch-dev/tripswitch:"+version+"\n"); n != 1 ||
		strings.Count(string(install), "image: ") != 1 {
		t.Errorf("install.yaml pins %d images to %s, has %d images", n, version, strings.Count(string(install), "image: "))
	}

	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(sums)), "\n")
	if len(lines) != 3+2+6 {
		t.Fatalf("SHA256SUMS:\n%s", sums)
	}
	for _, l := range lines {
		sum, name, _ := strings.Cut(l, "  ")
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
			t.Errorf("SHA256SUMS is wrong for %s", name)
		}
	}

	for module, want := range map[string]string{"breaker": "", "breakerhttp": "github.com/tripswitch-dev/tripswitch/breaker", "breakergrpc": "google.golang.org/grpc",
		"breakerprom": "github.com/prometheus/client_golang", "accessgate": "github.com/maypok86/otter/v2",
		"accessgateprom": "github.com/prometheus/client_golang"} {
		bom := readBOM(t, filepath.Join(out, module+"-"+version+".cdx.json"))
		if bom.Metadata.Component.Name != "github.com/tripswitch-dev/tripswitch/"+module {
			t.Errorf("%s's SBOM describes %q", module, bom.Metadata.Component.Name)
		}
		var names []string
		for _, c := range bom.Components {
			names = append(names, c.Name)
		}
		if want == "" && len(names) != 0 || want != "" && !slices.Contains(names, want) {
			t.Errorf("%s's SBOM lists %v, want %q", module, names, want)
		}
		if module == "accessgate" && slices.Contains(names, "github.com/prometheus/client_golang") {
			t.Errorf("accessgate's SBOM lists client_golang (its collector is accessgateprom's): %v", names)
		}
	}

	again := t.TempDir()
	release(t, again)
	for _, name := range []string{"SHA256SUMS"} {
		a, _ := os.ReadFile(filepath.Join(out, name))
		b, _ := os.ReadFile(filepath.Join(again, name))
		if !bytes.Equal(a, b) {
			t.Errorf("a second build from the same inputs differs:\n%s\n%s", a, b)
		}
	}
	t.Logf("image index %s", digest)
}

// bom is the part of a CycloneDX JSON document the test reads.
type bom struct {
	BOMFormat, SpecVersion string
	Metadata               struct {
		Timestamp string
		Component struct {
			Name, Version string
			Properties    []struct{ Name, Value string }
		}
	}
	Components []struct {
		Type, Name, Version, Purl string
		Hashes                    []struct{ Alg, Content string }
	}
}

func readBOM(t *testing.T, path string) bom {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var b bom
	if err := json.Unmarshal(data, &b); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b.BOMFormat != "CycloneDX" || b.SpecVersion != "1.6" || b.Metadata.Timestamp != "2027-01-15T08:00:00Z" {
		t.Errorf("%s: format %s %s, timestamp %s", path, b.BOMFormat, b.SpecVersion, b.Metadata.Timestamp)
	}
	return b
}

// checkImageSBOM: a platform's SBOM names the release and its commit, lists
// every module the binary says it was built with (and nothing else), and
// every file of the image with its SHA-256.
func checkImageSBOM(t *testing.T, path string, files map[string][]byte, revision string) {
	t.Helper()
	b := readBOM(t, path)
	if b.Metadata.Component.Name != "tripswitch" || b.Metadata.Component.Version != version {
		t.Errorf("%s describes %s %s", path, b.Metadata.Component.Name, b.Metadata.Component.Version)
	}
	if !slices.Contains(b.Metadata.Component.Properties, struct{ Name, Value string }{"golang:build:vcs.revision", revision}) {
		t.Errorf("%s: no vcs.revision %s in %v", path, revision, b.Metadata.Component.Properties)
	}
	bi, err := buildinfo.Read(bytes.NewReader(files["tripswitch"]))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		want["pkg:golang/"+m.Path+"@"+m.Version] = "library"
	}
	for name, data := range files {
		sum := sha256.Sum256(data)
		want["/"+name+" "+hex.EncodeToString(sum[:])] = "file"
	}
	got := map[string]string{}
	for _, c := range b.Components {
		switch c.Type {
		case "library":
			got[c.Purl] = c.Type
		case "file":
			if len(c.Hashes) == 1 && c.Hashes[0].Alg == "SHA-256" {
				got[c.Name+" "+c.Hashes[0].Content] = c.Type
			}
		}
	}
	if !maps.Equal(got, want) || len(want) < 50 {
		t.Errorf("%s lists %d components, the image has %d:\nSBOM  %v\nimage %v", path, len(got), len(want), got, want)
	}
}

// gitHead is the commit the repository is at.
func gitHead(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", "rev-parse", "HEAD")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// layerFiles returns every regular file of an image's layers.
func layerFiles(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(rc)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				data, err := io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
				files[h.Name] = data
			}
		}
		_ = rc.Close()
	}
	return files
}
