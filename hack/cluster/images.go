package cluster

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Image is a one-layer image of static binaries: what the cluster's own
// images (pause, CoreDNS) and the tests' webhooks are. There is no registry:
// Import puts it straight into containerd.
type Image struct {
	// Ref names it, e.g. registry.k8s.io/pause:3.10.2.
	Ref string
	// Files maps a path in the image to the file on this machine to copy
	// there (mode 0755).
	Files map[string]string
	// Entrypoint and User are the image's config.
	Entrypoint []string
	User       string
}

// epoch is every layer's and config's timestamp, so the same binaries give
// the same image.
var epoch = time.Unix(0, 0).UTC()

// Build writes the image as a docker-save tarball, which `ctr images import`
// reads, to path.
func (im Image) Build(path string) error {
	ref, err := name.ParseReference(im.Ref)
	if err != nil {
		return fmt.Errorf("image %q: %w", im.Ref, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for dst, src := range im.Files {
		data, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("image %s: %w", im.Ref, err)
		}
		hdr := &tar.Header{Name: filepath.Clean("/" + dst)[1:], Mode: 0o755, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerBytes)), nil })
	if err != nil {
		return fmt.Errorf("image %s: layer: %w", im.Ref, err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS, cfg.Created = "amd64", "linux", v1.Time{Time: epoch}
	cfg.Config.Entrypoint, cfg.Config.User = im.Entrypoint, im.User
	cfg.Config.Env = []string{"PATH=/"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	if err := tarball.WriteToFile(path, ref, img); err != nil {
		return fmt.Errorf("image %s: write %s: %w", im.Ref, path, err)
	}
	return nil
}

// Import loads an image archive (docker-save or OCI layout tar) into
// containerd's k8s.io namespace, where the kubelet finds it; indexName names
// an OCI index that carries no name of its own ("" for a docker-save tar).
func Import(l Layout, archive, indexName string) error {
	args := []string{"--address", l.containerdSocket(), "-n", "k8s.io", "images", "import", "--platform", "linux/amd64"}
	if indexName != "" {
		args = append(args, "--index-name", indexName)
	}
	if err := run(l.Bin("ctr"), append(args, archive)...); err != nil {
		return fmt.Errorf("import %s into containerd: %w", filepath.Base(archive), err)
	}
	return nil
}

// BuildAndImport builds im in dir and imports it.
func BuildAndImport(l Layout, dir string, im Image) error {
	path := filepath.Join(dir, filepath.Base(im.Files[im.Entrypoint[0]])+".tar")
	if err := im.Build(path); err != nil {
		return err
	}
	return Import(l, path, "")
}
