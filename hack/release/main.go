// Command release builds tripswitch's release artifacts without a container
// engine and without the network (every input is in the module cache, the
// repository and the machine's CA bundle):
//
//   - the controller image for linux/amd64 and linux/arm64 (or those of
//     -platforms) as an OCI image index, in an OCI layout (oci/) and as one tar of it: the static binary
//     on an empty base with the CA roots, user 65532, no shell;
//   - the Helm chart, packaged, with version and appVersion VERSION (so the
//     default image tag is VERSION);
//   - install.yaml, the kustomize build of config/default pinned to the same
//     image;
//   - a CycloneDX SBOM of each platform's image (every Go module linked into
//     the binary, read from its build information, and every file) and of
//     each library module (what its packages build with);
//   - SHA256SUMS of each.
//
// The image carries the OCI labels version, revision, source, licenses and
// created, and its binary the commit it was built from (-buildvcs): the
// release builds from a git checkout.
//
// The same inputs give the same bytes: binaries are built with -trimpath and
// no build ID, and every timestamp is SOURCE_DATE_EPOCH (default: the last
// commit's time).
//
//	go run ./hack/release -version v0.1.0 -out dist [-platforms linux/amd64]
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"sigs.k8s.io/kustomize/api/krusty"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Repository is where the chart and config/default point by default.
const Repository = "ghcr.io/tripswitch-dev/tripswitch"

// Platforms are the image's platforms, unless -platforms names fewer.
var Platforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// parsePlatforms reads -platforms: a comma-separated list of Platforms'
// os/arch, each at most once, in Platforms' order whatever the list's.
func parsePlatforms(list string) ([]v1.Platform, error) {
	want := map[string]bool{}
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.ContainsFunc(Platforms, func(p v1.Platform) bool { return p.OS+"/"+p.Architecture == s }) {
			return nil, fmt.Errorf("-platforms: %q is not one of %s", s, platformList(Platforms))
		}
		want[s] = true
	}
	var out []v1.Platform
	for _, p := range Platforms {
		if want[p.OS+"/"+p.Architecture] {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-platforms %q: name at least one of %s", list, platformList(Platforms))
	}
	return out, nil
}

func platformList(ps []v1.Platform) string {
	var names []string
	for _, p := range ps {
		names = append(names, p.OS+"/"+p.Architecture)
	}
	return strings.Join(names, ",")
}

// versionPattern is a release version: v, then SemVer.
var versionPattern = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// defaultCABundle is Debian's (and most distributions') bundle of the
// system roots, which URL webhooks without a caBundle are verified against.
const defaultCABundle = "/etc/ssl/certs/ca-certificates.crt"

func main() {
	version := flag.String("version", "", "the release version, vX.Y.Z (required)")
	out := flag.String("out", "dist", "output directory (created; existing artifacts of this version are replaced)")
	repo := flag.String("repository", Repository, "the image repository the chart and install.yaml point at")
	caBundle := flag.String("ca-bundle", defaultCABundle, "PEM bundle of CA roots to put in the image")
	platforms := flag.String("platforms", platformList(Platforms), "the image's platforms, comma-separated (one, for a local cluster, builds in about half the time)")
	flag.Parse()
	ps, err := parsePlatforms(*platforms)
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(2)
	}
	if err := run(*version, *out, *repo, *caBundle, ps); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(version, out, repo, caBundle string, platforms []v1.Platform) error {
	if !versionPattern.MatchString(version) {
		return fmt.Errorf("-version %q: want vMAJOR.MINOR.PATCH (SemVer with a leading v)", version)
	}
	if repo == "" || strings.Contains(repo, ":") && !strings.Contains(repo, "/") {
		return fmt.Errorf("-repository %q: want a repository without a tag, e.g. %s", repo, Repository)
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	epoch, err := sourceDateEpoch(root)
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(caBundle)
	if err != nil {
		return fmt.Errorf("-ca-bundle: %w (install the ca-certificates package, or point -ca-bundle at a PEM bundle)", err)
	}
	if !bytes.Contains(ca, []byte("-----BEGIN CERTIFICATE-----")) {
		return fmt.Errorf("-ca-bundle %s holds no PEM certificate", caBundle)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	image := repo + ":" + version
	var artifacts []string

	src, err := stage(root)
	if err != nil {
		return err
	}
	defer os.RemoveAll(src)
	b, err := buildIndex(src, version, ca, epoch, platforms)
	if err != nil {
		return err
	}
	idx := b.index
	ociDir := filepath.Join(out, "oci")
	if err := os.RemoveAll(ociDir); err != nil {
		return err
	}
	if _, err := layout.Write(ociDir, idx); err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	ociTar := fmt.Sprintf("tripswitch-%s.oci.tar", version)
	if err := tarDir(ociDir, filepath.Join(out, ociTar), epoch); err != nil {
		return err
	}
	artifacts = append(artifacts, ociTar)

	chartFile, err := packageChart(root, version, repo, out, epoch)
	if err != nil {
		return err
	}
	artifacts = append(artifacts, chartFile)

	manifest, err := installYAML(root, repo, version)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "install.yaml"), manifest, 0o644); err != nil {
		return err
	}
	artifacts = append(artifacts, "install.yaml")

	sboms := b.sboms
	for _, m := range LibraryModules {
		sbom, err := librarySBOM(src, m, b.vcs.Revision, epoch)
		if err != nil {
			return err
		}
		sboms[m+"-"+version+".cdx.json"] = sbom
	}
	for _, name := range slices.Sorted(maps.Keys(sboms)) {
		if err := os.WriteFile(filepath.Join(out, name), sboms[name], 0o644); err != nil {
			return err
		}
		artifacts = append(artifacts, name)
	}
	if b.vcs.Modified {
		fmt.Fprintln(os.Stderr, "release: warning: the checkout has uncommitted changes (vcs.modified=true in the binary)")
	}

	if err := checksums(out, artifacts); err != nil {
		return err
	}
	fmt.Printf("image %s (index %s, %d platforms, revision %s) in %s and %s\nchart %s\ninstall.yaml\n%d SBOMs (CycloneDX)\nSHA256SUMS\n",
		image, digest, len(platforms), b.vcs.Revision, ociDir, ociTar, chartFile, len(sboms))
	return nil
}

// built is the image index and what the release says about it.
type built struct {
	index v1.ImageIndex
	// sboms holds each platform's SBOM, by file name.
	sboms map[string][]byte
	vcs   vcsInfo
}

// buildIndex builds the binary for each platform and puts each on an empty
// base with the CA roots, labelled and described by an SBOM.
func buildIndex(root, version string, ca []byte, epoch time.Time, platforms []v1.Platform) (*built, error) {
	b := &built{sboms: map[string][]byte{}}
	var idx v1.ImageIndex = empty.Index
	idx = mutate.IndexMediaType(idx, types.OCIImageIndex)
	for _, p := range platforms {
		bin, err := buildBinary(root, version, p)
		if err != nil {
			return nil, err
		}
		bi, vcs, err := readBuildInfo(bin)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", p.OS, p.Architecture, err)
		}
		b.vcs = vcs
		files := imageFiles(bin, ca)
		labels := ociLabels(version, vcs.Revision, epoch)
		img, err := platformImage(files, labels, p, epoch)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
		sbom, err := imageSBOM(version, p, bi, files, epoch)
		if err != nil {
			return nil, err
		}
		b.sboms[fmt.Sprintf("tripswitch-%s.%s-%s.cdx.json", version, p.OS, p.Architecture)] = sbom
	}
	b.index = mutate.Annotations(idx, ociLabels(version, b.vcs.Revision, epoch)).(v1.ImageIndex)
	return b, nil
}

// ociLabels are the image's labels and the index's annotations, under the
// OCI image spec's pre-defined keys.
func ociLabels(version, revision string, epoch time.Time) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "tripswitch",
		"org.opencontainers.image.description": "A Kubernetes controller that is a circuit breaker for approved admission webhooks",
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.revision":    revision,
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.licenses":    License,
		"org.opencontainers.image.created":     epoch.UTC().Format(time.RFC3339),
	}
}

// buildBinary builds a static, reproducible controller binary.
func buildBinary(root, version string, p v1.Platform) ([]byte, error) {
	dir, err := os.MkdirTemp("", "tripswitch-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "tripswitch")
	// -buildvcs=true: the binary records the commit it was built from
	// (`go version -m` shows vcs.revision, and the main module's version
	// comes from it instead of "(devel)"); it fails outside a git checkout.
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=true",
		"-ldflags", "-s -w -buildid= -X main.version="+version, "-o", bin, "./cmd/tripswitch")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture, "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build %s/%s: %w\n%s", p.OS, p.Architecture, err, out)
	}
	return os.ReadFile(bin)
}

// imageFiles are the files of an image's one layer: the binary, the CA
// roots and a passwd entry for user 65532.
func imageFiles(bin, ca []byte) []imageFile {
	return []imageFile{
		{"etc/group", []byte("root:x:0:\nnonroot:x:65532:\n")},
		{"etc/passwd", []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{"etc/ssl/certs/ca-certificates.crt", ca},
		{"tripswitch", bin},
	}
}

// platformImage is one platform's image: a single layer holding files.
func platformImage(files []imageFile, labels map[string]string, p v1.Platform, epoch time.Time) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"etc/", "etc/ssl/", "etc/ssl/certs/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		mode := int64(0o644)
		if f.name == "tripswitch" {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: mode, Size: int64(len(f.data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.Append(mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1),
		mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "hack/release", Comment: "tripswitch, CA roots, passwd"}})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = p.OS, p.Architecture, p.Variant
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.User = "65532:65532"
	cfg.Config.Entrypoint = []string{"/tripswitch"}
	cfg.Config.Cmd = nil
	cfg.Config.WorkingDir = "/"
	cfg.Config.Env = []string{"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	cfg.Config.Labels = labels
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, v1.Time{Time: epoch})
}

// packageChart writes the chart with version and appVersion set.
func packageChart(root, version, repo, out string, epoch time.Time) (string, error) {
	c, err := loader.Load(filepath.Join(root, "charts", "tripswitch"))
	if err != nil {
		return "", fmt.Errorf("load chart: %w", err)
	}
	c.Metadata.Version = strings.TrimPrefix(version, "v")
	c.Metadata.AppVersion = version
	if repo != Repository {
		c.Values["image"].(map[string]any)["repository"] = repo
		data, err := yaml.Marshal(c.Values)
		if err != nil {
			return "", err
		}
		for _, f := range c.Raw {
			if f.Name == chartutil.ValuesfileName {
				f.Data = data
			}
		}
	}
	c.ModTime, c.SchemaModTime = epoch, epoch
	for _, f := range append(append([]*common.File(nil), c.Templates...), c.Files...) {
		f.ModTime = epoch
	}
	for _, f := range c.Raw {
		f.ModTime = epoch
	}
	path, err := chartutil.Save(c, out)
	if err != nil {
		return "", fmt.Errorf("package chart: %w", err)
	}
	return filepath.Base(path), nil
}

// installYAML is config/default, built by kustomize, with its image pinned.
func installYAML(root, repo, version string) ([]byte, error) {
	fsys := filesys.MakeFsOnDisk()
	dir, err := os.MkdirTemp("", "tripswitch-release-kustomize-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	base, err := filepath.Rel(dir, filepath.Join(root, "config", "default"))
	if err != nil {
		return nil, err
	}
	k := kustypes.Kustomization{
		TypeMeta:  kustypes.TypeMeta{APIVersion: kustypes.KustomizationVersion, Kind: kustypes.KustomizationKind},
		Resources: []string{base}, // kustomize takes only relative paths
		Images:    []kustypes.Image{{Name: Repository, NewName: repo, NewTag: version}},
	}
	data, err := yaml.Marshal(k)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), data, 0o644); err != nil {
		return nil, err
	}
	opts := krusty.MakeDefaultOptions()
	opts.LoadRestrictions = kustypes.LoadRestrictionsNone
	m, err := krusty.MakeKustomizer(opts).Run(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize config/default: %w", err)
	}
	manifest, err := m.AsYaml()
	if err != nil {
		return nil, err
	}
	if !bytes.Contains(manifest, []byte("image: "+repo+":"+version+"\n")) {
		return nil, fmt.Errorf("install.yaml does not pin image %s:%s", repo, version)
	}
	return manifest, nil
}

// tarDir writes dir as a tar with fixed timestamps and owners, in name
// order, so the same layout gives the same bytes.
func tarDir(dir, dest string, epoch time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir {
			names = append(names, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	f, err := os.Create(dest)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, path := range names {
		rel, _ := filepath.Rel(dir, path)
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: epoch, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: fi.Size()}
		if fi.IsDir() {
			h.Name, h.Mode, h.Typeflag, h.Size = h.Name+"/", 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.IsDir() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if _, err := tw.Write(data); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func checksums(out string, names []string) error {
	var b strings.Builder
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(out, n))
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(sum[:]), n)
	}
	return os.WriteFile(filepath.Join(out, "SHA256SUMS"), []byte(b.String()), 0o644)
}

// sourceDateEpoch is $SOURCE_DATE_EPOCH, else the last commit's time.
func sourceDateEpoch(root string) (time.Time, error) {
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", v, err)
		}
		return time.Unix(secs, 0).UTC(), nil
	}
	cmd := exec.Command("git", "log", "-1", "--format=%ct")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return time.Time{}, errors.New("no SOURCE_DATE_EPOCH and no git commit to take the time from: set SOURCE_DATE_EPOCH")
	}
	secs, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("git commit time %q: %w", out, err)
	}
	return time.Unix(secs, 0).UTC(), nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(data), "module github.com/tripswitch-dev/tripswitch\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run from inside the tripswitch repository")
		}
		dir = parent
	}
}
