// Package sbom writes the software bill of materials of node-agent's image:
// an SPDX 2.3 JSON document listing every Debian package installed in the
// image (read from the image's own dpkg status file) and every Go module
// linked into its binaries (read from their build information). The same
// inputs give the same bytes: nothing in it comes from the clock or chance.
package sbom

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// MediaType is the media type of the document, as an OCI artifact's
// artifactType and layer.
const MediaType = "application/spdx+json"

// DebPackage is one installed Debian package.
type DebPackage struct {
	Name, Version, Architecture, Source string
}

// ReadDpkgStatus reads a dpkg status file (var/lib/dpkg/status) and returns
// the packages whose files are in the image, sorted by name and
// architecture.
//
// The Status field is "WANT FLAG STATE" (dpkg(1), "Package states"): what
// decides whether a package's files are on disk is its state, not what the
// admin wants, so "hold ok installed" (apt-mark hold) and "deinstall ok
// installed" (removal pending) count, and only "not-installed" and
// "config-files" (conffiles left behind) do not. A debootstrap base has
// only "install ok installed".
func ReadDpkgStatus(r io.Reader) ([]DebPackage, error) {
	var out []DebPackage
	var cur DebPackage
	var status string
	statusLine := 0
	line := 0
	flush := func() error {
		if cur.Name != "" {
			words := strings.Fields(status)
			if len(words) != 3 {
				return fmt.Errorf("dpkg status, package %s (line %d): Status %q is not \"WANT FLAG STATE\"", cur.Name, statusLine, status)
			}
			if state := words[2]; state != "not-installed" && state != "config-files" {
				out = append(out, cur)
			}
		}
		cur, status = DebPackage{}, ""
		return nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line++
		l := sc.Text()
		if l == "" {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		if l[0] == ' ' || l[0] == '\t' {
			continue // a continuation of a multi-line field
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			return nil, fmt.Errorf("dpkg status, line %d: %q is neither a field nor a continuation", line, l)
		}
		v = strings.TrimSpace(v)
		// Field names are case-insensitive (deb-control(5)).
		switch strings.ToLower(k) {
		case "package":
			cur.Name = v
		case "status":
			status, statusLine = v, line
		case "version":
			cur.Version = v
		case "architecture":
			cur.Architecture = v
		case "source":
			// "Source: name (version)" when the source version differs.
			cur.Source, _, _ = strings.Cut(v, " ")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("dpkg status lists no installed package")
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Architecture < out[j].Architecture
	})
	return out, nil
}

// GoBinary is a Go program of the image and the modules built into it.
type GoBinary struct {
	// Path is where the binary is in the image, such as /usr/local/bin/node-agent.
	Path      string
	GoVersion string
	Main      GoModule
	Deps      []GoModule
}

// GoModule is one module of a Go binary's build.
type GoModule struct {
	Path, Version, Sum string
}

// ReadGoBinary reads the build information of the Go binary at file, which
// is at path in the image.
func ReadGoBinary(file, path string) (GoBinary, error) {
	bi, err := buildinfo.ReadFile(file)
	if err != nil {
		return GoBinary{}, fmt.Errorf("reading the Go build information of %s: %w", file, err)
	}
	b := GoBinary{Path: path, GoVersion: bi.GoVersion, Main: GoModule{Path: bi.Main.Path, Version: bi.Main.Version, Sum: bi.Main.Sum}}
	for _, d := range bi.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		b.Deps = append(b.Deps, GoModule{Path: m.Path, Version: m.Version, Sum: m.Sum})
	}
	sort.Slice(b.Deps, func(i, j int) bool { return b.Deps[i].Path < b.Deps[j].Path })
	return b, nil
}

// Image is what the document describes.
type Image struct {
	// Name is the image reference, such as localhost/node-agent:v1.
	Name string
	// Digest is the image manifest's digest (sha256:...).
	Digest string
	// Created is the image's creation time (the commit's).
	Created time.Time
	// Distro names the Debian release, for the packages' purls.
	Distro string
	// Version is the version node-agent's binaries are stamped with
	// (pkg/version), listed for a binary whose build information has
	// none: a build from a checkout records its main module as "(devel)".
	Version  string
	Packages []DebPackage
	Binaries []GoBinary
}

// SPDX 2.3 JSON (https://spdx.github.io/spdx-spec/v2.3/), the fields used.
type document struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      creationInfo   `json:"creationInfo"`
	Packages          []pkg          `json:"packages"`
	Relationships     []relationship `json:"relationships"`
}

type creationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type pkg struct {
	SPDXID                string        `json:"SPDXID"`
	Name                  string        `json:"name"`
	VersionInfo           string        `json:"versionInfo,omitempty"`
	DownloadLocation      string        `json:"downloadLocation"`
	FilesAnalyzed         bool          `json:"filesAnalyzed"`
	PrimaryPackagePurpose string        `json:"primaryPackagePurpose,omitempty"`
	SourceInfo            string        `json:"sourceInfo,omitempty"`
	Checksums             []checksum    `json:"checksums,omitempty"`
	ExternalRefs          []externalRef `json:"externalRefs,omitempty"`
	Comment               string        `json:"comment,omitempty"`
}

type checksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type externalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type relationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

var notIDChar = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

func spdxID(kind, name string) string {
	return "SPDXRef-" + kind + "-" + notIDChar.ReplaceAllString(name, "-")
}

// idSet hands out SPDX IDs that are unique in the document: two names that
// differ only in characters an ID cannot hold (github.com/a/b-c and
// github.com/a-b/c) get a numbered second one instead of one element for both.
type idSet map[string]bool

func (u idSet) add(kind, name string) string {
	base := spdxID(kind, name)
	id := base
	for n := 2; u[id]; n++ {
		id = fmt.Sprintf("%s-%d", base, n)
	}
	u[id] = true
	return id
}

func purl(ref string) []externalRef {
	return []externalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: ref}}
}

// SPDX returns the document for img, as indented JSON.
func SPDX(img Image) ([]byte, error) {
	if img.Digest == "" || !strings.HasPrefix(img.Digest, "sha256:") {
		return nil, fmt.Errorf("image digest %q is not a sha256 digest", img.Digest)
	}
	hexDigest := strings.TrimPrefix(img.Digest, "sha256:")
	repo, tag := img.Name, ""
	if i := strings.LastIndex(img.Name, ":"); i > strings.LastIndex(img.Name, "/") {
		repo, tag = img.Name[:i], img.Name[i+1:]
	}
	doc := document{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name: img.Name,
		// Unique per image: its digest.
		DocumentNamespace: "https://node-agent.io/spdx/image/" + hexDigest,
		CreationInfo:      creationInfo{Created: img.Created.UTC().Format(time.RFC3339), Creators: []string{"Tool: node-agent-internal-sbom"}},
	}
	imageID := "SPDXRef-Image"
	doc.Packages = append(doc.Packages, pkg{
		SPDXID: imageID, Name: filepath.Base(repo), VersionInfo: tag, DownloadLocation: "NOASSERTION",
		PrimaryPackagePurpose: "CONTAINER",
		Checksums:             []checksum{{Algorithm: "SHA256", ChecksumValue: hexDigest}},
		ExternalRefs:          purl(fmt.Sprintf("pkg:oci/%s@sha256%%3A%s?repository_url=%s", filepath.Base(repo), hexDigest, filepath.Dir(repo))),
	})
	doc.Relationships = append(doc.Relationships, relationship{"SPDXRef-DOCUMENT", "DESCRIBES", imageID})
	ids := idSet{"SPDXRef-DOCUMENT": true, imageID: true}
	debs := map[string]bool{}
	for _, p := range img.Packages {
		key := p.Name + ":" + p.Architecture
		if debs[key] {
			return nil, fmt.Errorf("package %s listed twice", key)
		}
		debs[key] = true
		id := ids.add("deb", p.Name+"-"+p.Architecture)
		q := fmt.Sprintf("pkg:deb/debian/%s@%s?arch=%s", p.Name, p.Version, p.Architecture)
		if img.Distro != "" {
			q += "&distro=" + img.Distro
		}
		pk := pkg{SPDXID: id, Name: p.Name, VersionInfo: p.Version, DownloadLocation: "NOASSERTION", ExternalRefs: purl(q)}
		if p.Source != "" && p.Source != p.Name {
			pk.SourceInfo = "built from the Debian source package " + p.Source
		}
		doc.Packages = append(doc.Packages, pk)
		doc.Relationships = append(doc.Relationships, relationship{imageID, "CONTAINS", id})
	}
	// A module or a Go release that two binaries share is one element.
	modules := map[string]string{}
	for _, b := range img.Binaries {
		id := ids.add("go-binary", b.Path)
		version := b.Main.Version
		if version == "(devel)" && img.Version != "" {
			version = img.Version
		}
		doc.Packages = append(doc.Packages, pkg{
			SPDXID: id, Name: b.Path, VersionInfo: version, DownloadLocation: "NOASSERTION",
			PrimaryPackagePurpose: "APPLICATION", Comment: "Go program of module " + b.Main.Path + ", built with " + b.GoVersion,
		})
		doc.Relationships = append(doc.Relationships, relationship{imageID, "CONTAINS", id})
		// The standard library is linked in too, at the toolchain's
		// version; scanners look Go's own advisories up under
		// pkg:golang/stdlib with the version without "go" (as
		// golang.org/x/vuln and the purl spec's examples spell it).
		if goVersion, _, _ := strings.Cut(b.GoVersion, " "); strings.HasPrefix(goVersion, "go") {
			v := strings.TrimPrefix(goVersion, "go")
			key := "stdlib@" + v
			sid, ok := modules[key]
			if !ok {
				sid = ids.add("go-stdlib", v)
				modules[key] = sid
				doc.Packages = append(doc.Packages, pkg{SPDXID: sid, Name: "stdlib", VersionInfo: goVersion, DownloadLocation: "NOASSERTION",
					PrimaryPackagePurpose: "LIBRARY", ExternalRefs: purl("pkg:golang/stdlib@" + v), Comment: "the Go standard library of " + goVersion})
			}
			doc.Relationships = append(doc.Relationships, relationship{id, "DEPENDS_ON", sid})
		}
		for _, m := range b.Deps {
			key := m.Path + "@" + m.Version
			mid, ok := modules[key]
			if !ok {
				mid = ids.add("go-module", key)
				modules[key] = mid
				pk := pkg{SPDXID: mid, Name: m.Path, VersionInfo: m.Version, DownloadLocation: "NOASSERTION",
					PrimaryPackagePurpose: "LIBRARY", ExternalRefs: purl("pkg:golang/" + m.Path + "@" + m.Version)}
				if m.Sum != "" {
					pk.Comment = "go.sum hash " + m.Sum
				}
				doc.Packages = append(doc.Packages, pk)
			}
			doc.Relationships = append(doc.Relationships, relationship{id, "DEPENDS_ON", mid})
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
