package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// License is the SPDX identifier of tripswitch's license (LICENSE), for the
// image's label and the SBOMs.
const License = "Apache-2.0"

// Source is the repository the image's label and the SBOMs point at.
const Source = "https://github.com/tripswitch-dev/tripswitch"

// LibraryModules are the library's modules, each released on its own tag
// (<dir>/vX.Y.Z); the release writes an SBOM of what each one builds.
var LibraryModules = []string{"breaker", "breakerhttp", "breakergrpc", "breakerprom", "accessgate", "accessgateprom"}

// vcsInfo is what the go command stamped into a binary about its checkout.
type vcsInfo struct {
	Revision, Time string
	Modified       bool
}

// readBuildInfo reads a binary's build information and its VCS stamp, which
// the release requires: it builds from a git checkout.
func readBuildInfo(bin []byte) (*debug.BuildInfo, vcsInfo, error) {
	bi, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		return nil, vcsInfo{}, fmt.Errorf("read the binary's build information: %w", err)
	}
	var v vcsInfo
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	if v.Revision == "" {
		return nil, v, errors.New("the binary carries no vcs.revision: build from a git checkout with git installed")
	}
	return bi, v, nil
}

// imageFile is a file of an image's layer, for its SBOM.
type imageFile struct {
	name string
	data []byte
}

// imageSBOM is a CycloneDX BOM of one platform's image: the controller as
// the application (version, VCS revision, build settings), every Go module
// linked into it as read from the binary itself, and each file of the image
// with its SHA-256. Everything in it comes from the build, and its time is
// SOURCE_DATE_EPOCH, so the same inputs give the same bytes.
func imageSBOM(version string, p v1.Platform, bi *debug.BuildInfo, files []imageFile, epoch time.Time) ([]byte, error) {
	main := &cdx.Component{
		BOMRef:             purl(bi.Main.Path, version),
		Type:               cdx.ComponentTypeApplication,
		Name:               "tripswitch",
		Version:            version,
		PackageURL:         purl(bi.Main.Path, version),
		Licenses:           &cdx.Licenses{{License: &cdx.License{ID: License}}},
		ExternalReferences: &[]cdx.ExternalReference{{Type: cdx.ERTypeVCS, URL: Source}},
		Properties:         buildProperties(bi, p),
	}
	components := moduleComponents(bi.Deps)
	for _, f := range files {
		sum := sha256.Sum256(f.data)
		components = append(components, cdx.Component{
			BOMRef: "file:" + f.name, Type: cdx.ComponentTypeFile, Name: "/" + f.name,
			Hashes: &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: hex.EncodeToString(sum[:])}},
		})
	}
	return encodeBOM(main, components, epoch, bi.Main.Path+"@"+version+" "+p.OS+"/"+p.Architecture)
}

// moduleComponents lists Go modules as CycloneDX libraries, by module path
// and version (a replacement's when replaced), with their go.sum hash.
func moduleComponents(mods []*debug.Module) []cdx.Component {
	var out []cdx.Component
	for _, m := range mods {
		if m.Replace != nil {
			m = m.Replace
		}
		c := cdx.Component{BOMRef: purl(m.Path, m.Version), Type: cdx.ComponentTypeLibrary, Name: m.Path, Version: m.Version, PackageURL: purl(m.Path, m.Version)}
		if m.Sum != "" {
			c.Properties = &[]cdx.Property{{Name: "golang:go.sum", Value: m.Sum}}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b cdx.Component) int { return strings.Compare(a.BOMRef, b.BOMRef) })
	return slices.CompactFunc(out, func(a, b cdx.Component) bool { return a.BOMRef == b.BOMRef })
}

func buildProperties(bi *debug.BuildInfo, p v1.Platform) *[]cdx.Property {
	props := []cdx.Property{{Name: "golang:version", Value: bi.GoVersion}, {Name: "golang:GOOS", Value: p.OS}, {Name: "golang:GOARCH", Value: p.Architecture}}
	for _, s := range bi.Settings {
		if strings.HasPrefix(s.Key, "vcs") || s.Key == "CGO_ENABLED" || s.Key == "-trimpath" || s.Key == "-ldflags" {
			props = append(props, cdx.Property{Name: "golang:build:" + s.Key, Value: s.Value})
		}
	}
	return &props
}

// librarySBOM is a CycloneDX BOM of one library module: the modules its
// packages build with (`go list -deps`, tests excluded), from the module
// cache.
func librarySBOM(root, dir, revision string, epoch time.Time) ([]byte, error) {
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Module,Standard", "./...")
	cmd.Dir = filepath.Join(root, dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps in %s: %w\n%s", dir, err, stderr.Bytes())
	}
	type listed struct {
		Standard bool
		Module   *struct {
			Path, Version string
			Main          bool
			Replace       *struct{ Path, Version string }
		}
	}
	var mainPath string
	var mods []*debug.Module
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list -deps in %s: %w", dir, err)
		}
		switch m := p.Module; {
		case p.Standard || m == nil:
		case m.Main:
			mainPath = m.Path
		default:
			d := &debug.Module{Path: m.Path, Version: m.Version}
			if m.Replace != nil && m.Replace.Version == "" {
				// A sibling module of this repository (replace ../breaker):
				// what is built is this revision of it.
				d.Version = "v0.0.0+" + revision
			}
			mods = append(mods, d)
		}
	}
	if mainPath == "" {
		return nil, fmt.Errorf("go list -deps in %s: no main module", dir)
	}
	main := &cdx.Component{
		BOMRef: purl(mainPath, ""), Type: cdx.ComponentTypeLibrary, Name: mainPath, PackageURL: purl(mainPath, ""),
		Licenses:           &cdx.Licenses{{License: &cdx.License{ID: License}}},
		ExternalReferences: &[]cdx.ExternalReference{{Type: cdx.ERTypeVCS, URL: Source}},
		Properties:         &[]cdx.Property{{Name: "golang:build:vcs.revision", Value: revision}},
	}
	return encodeBOM(main, moduleComponents(mods), epoch, mainPath+" "+revision)
}

// encodeBOM writes a CycloneDX 1.6 JSON BOM whose serial number is derived
// from seed, so that it is reproducible.
func encodeBOM(main *cdx.Component, components []cdx.Component, epoch time.Time, seed string) ([]byte, error) {
	bom := cdx.NewBOM()
	bom.SerialNumber = "urn:uuid:" + uuidFrom(seed)
	bom.Metadata = &cdx.Metadata{
		Timestamp: epoch.UTC().Format(time.RFC3339),
		Tools:     &cdx.ToolsChoice{Components: &[]cdx.Component{{Type: cdx.ComponentTypeApplication, Name: "tripswitch hack/release"}}},
		Component: main,
	}
	bom.Components = &components
	deps := make([]string, 0, len(components))
	for _, c := range components {
		deps = append(deps, c.BOMRef)
	}
	bom.Dependencies = &[]cdx.Dependency{{Ref: main.BOMRef, Dependencies: &deps}}
	var buf bytes.Buffer
	enc := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON).SetPretty(true)
	if err := enc.EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		return nil, fmt.Errorf("encode SBOM: %w", err)
	}
	return buf.Bytes(), nil
}

// purl is a Go module's package URL.
func purl(path, version string) string {
	if version == "" {
		return "pkg:golang/" + path
	}
	return "pkg:golang/" + path + "@" + version
}

// uuidFrom formats SHA-256(seed) as a version 5 style UUID.
func uuidFrom(seed string) string {
	h := sha256.Sum256([]byte(seed))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	x := hex.EncodeToString(h[:16])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}
