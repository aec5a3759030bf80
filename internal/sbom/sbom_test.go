package sbom

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

const status = `Package: libvirt0
Status: install ok installed
Priority: optional
Architecture: amd64
Source: libvirt
Version: 9.0.0-4+deb12u2
Description: library for interfacing with different virtualization systems
 Libvirt is a C toolkit to interact with the virtualization capabilities
 .
 of recent versions of Linux.

Package: qemu-system-x86
Status: install ok installed
Architecture: amd64
Source: qemu (1:7.2+dfsg-7+deb12u7)
Version: 1:7.2+dfsg-7+deb12u7

Package: removed-one
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0

Package: base-files
Status: install ok installed
Architecture: amd64
Version: 12.4+deb12u8

Package: held
Status: hold ok installed
Architecture: all
Version: 2.0

package: lower-case-fields
status: install ok installed
architecture: amd64
version: 3.0

Package: purged
Status: purge ok not-installed
Architecture: amd64
`

func TestReadDpkgStatus(t *testing.T) {
	pkgs, err := ReadDpkgStatus(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	want := []DebPackage{
		{Name: "base-files", Version: "12.4+deb12u8", Architecture: "amd64"},
		{Name: "held", Version: "2.0", Architecture: "all"},
		{Name: "libvirt0", Version: "9.0.0-4+deb12u2", Architecture: "amd64", Source: "libvirt"},
		{Name: "lower-case-fields", Version: "3.0", Architecture: "amd64"},
		{Name: "qemu-system-x86", Version: "1:7.2+dfsg-7+deb12u7", Architecture: "amd64", Source: "qemu"},
	}
	if len(pkgs) != len(want) {
		t.Fatalf("got %+v", pkgs)
	}
	for i := range want {
		if pkgs[i] != want[i] {
			t.Errorf("package %d: %+v, want %+v", i, pkgs[i], want[i])
		}
	}
	for _, bad := range []string{
		"",
		"Package: x\nno colon here\n",
		"Package: x\nStatus: deinstall ok config-files\n", // nothing installed
		"Package: x\nVersion: 1\n",                        // no Status: not a status file (dpkg's available file?)
		"Package: x\nStatus: installed\n",
	} {
		if _, err := ReadDpkgStatus(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestSPDX writes a document for sample packages and modules, and checks what an SBOM reader needs from it; the same
// inputs give the same bytes.
func TestSPDX(t *testing.T) {
	pkgs, err := ReadDpkgStatus(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	// ReadGoBinary on the image's real binaries is checked in test/node
	// (TestImageArchive); a test binary's build info lists no modules.
	bin := GoBinary{Path: "/usr/local/bin/node-agent", GoVersion: "go1.26.8", Main: GoModule{Path: "github.com/node-agent/node-agent", Version: "(devel)"},
		Deps: []GoModule{{Path: "k8s.io/client-go", Version: "v0.36.3", Sum: "h1:x"}, {Path: "libvirt.org/go/libvirt", Version: "v1.11010.0"}}}
	if _, err := ReadGoBinary("sbom_test.go", "/x"); err == nil {
		t.Error("a file that is no Go binary was read")
	}
	img := Image{Name: "localhost/node-agent:v1", Digest: "sha256:" + strings.Repeat("ab", 32), Created: time.Unix(1700000000, 0),
		Distro: "bookworm", Packages: pkgs, Binaries: []GoBinary{bin}}
	doc, err := SPDX(img)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := SPDX(img)
	if !bytes.Equal(doc, again) {
		t.Error("the same inputs gave two documents")
	}
	var d document
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	if d.SPDXVersion != "SPDX-2.3" || d.CreationInfo.Created != "2023-11-14T22:13:20Z" || !strings.HasSuffix(d.DocumentNamespace, strings.Repeat("ab", 32)) {
		t.Errorf("header %+v", d)
	}
	byName := map[string]pkg{}
	ids := map[string]bool{}
	for _, p := range d.Packages {
		byName[p.Name] = p
		if ids[p.SPDXID] {
			t.Errorf("SPDXID %s twice", p.SPDXID)
		}
		ids[p.SPDXID] = true
	}
	if p := byName["qemu-system-x86"]; p.VersionInfo != "1:7.2+dfsg-7+deb12u7" ||
		p.ExternalRefs[0].ReferenceLocator != "pkg:deb/debian/qemu-system-x86@1:7.2+dfsg-7+deb12u7?arch=amd64&distro=bookworm" {
		t.Errorf("qemu: %+v", p)
	}
	if len(bin.Deps) == 0 {
		t.Fatal("the test binary lists no module")
	}
	m := bin.Deps[0]
	if p, ok := byName[m.Path]; !ok || p.VersionInfo != m.Version {
		t.Errorf("module %s %s missing: %+v", m.Path, m.Version, p)
	}
	for _, r := range d.Relationships {
		if !ids[r.Related] || (r.Element != "SPDXRef-DOCUMENT" && !ids[r.Element]) {
			t.Errorf("relationship %+v names an unknown element", r)
		}
	}
	if _, err := SPDX(Image{Name: "x", Digest: "md5:1"}); err == nil {
		t.Error("a digest that is not sha256 was taken")
	}
}

// TestSPDXGoBinaries: two binaries that share modules and a Go release list
// each once, with a relationship from each binary; names that map to one
// SPDX ID get two IDs; a "(devel)" binary carries the image's version.
func TestSPDXGoBinaries(t *testing.T) {
	shared := GoModule{Path: "k8s.io/client-go", Version: "v0.36.3"}
	bins := []GoBinary{
		{Path: "/usr/local/bin/node-agent", GoVersion: "go1.26.8", Main: GoModule{Path: "github.com/node-agent/node-agent", Version: "(devel)"},
			Deps: []GoModule{{Path: "example.com/a/b-c", Version: "v1.0.0"}, {Path: "example.com/a-b/c", Version: "v1.0.0"}, shared}},
		{Path: "/usr/local/bin/node-agent-discover", GoVersion: "go1.26.8 X:nodwarf5", Main: GoModule{Path: "github.com/node-agent/node-agent", Version: "v0.2.0"},
			Deps: []GoModule{shared}},
	}
	doc, err := SPDX(Image{Name: "localhost/node-agent:v1", Digest: "sha256:" + strings.Repeat("cd", 32), Version: "v1-3-gabc",
		Packages: []DebPackage{{Name: "libc6", Version: "2.36-9", Architecture: "amd64"}}, Binaries: bins})
	if err != nil {
		t.Fatal(err)
	}
	var d document
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	byID := map[string]pkg{}
	count := map[string]int{} // name@version
	for _, p := range d.Packages {
		if _, ok := byID[p.SPDXID]; ok {
			t.Errorf("SPDXID %s twice", p.SPDXID)
		}
		byID[p.SPDXID] = p
		count[p.Name+"@"+p.VersionInfo]++
	}
	for nv, want := range map[string]int{
		"k8s.io/client-go@v0.36.3": 1, "example.com/a/b-c@v1.0.0": 1, "example.com/a-b/c@v1.0.0": 1, "stdlib@go1.26.8": 1,
		"/usr/local/bin/node-agent@v1-3-gabc": 1, "/usr/local/bin/node-agent-discover@v0.2.0": 1, "libc6@2.36-9": 1,
	} {
		if count[nv] != want {
			t.Errorf("%s listed %d times, want %d", nv, count[nv], want)
		}
	}
	if len(d.Packages) != 8 { // the image, libc6, two binaries, stdlib and three modules
		t.Errorf("%d packages, want 8", len(d.Packages))
	}
	dependsOn := map[string][]string{} // binary -> names it depends on
	for _, r := range d.Relationships {
		if _, ok := byID[r.Related]; !ok {
			t.Errorf("relationship %+v names an unknown element", r)
		}
		if r.Type == "DEPENDS_ON" {
			dependsOn[byID[r.Element].Name] = append(dependsOn[byID[r.Element].Name], byID[r.Related].Name)
		}
	}
	if got := strings.Join(dependsOn["/usr/local/bin/node-agent-discover"], " "); got != "stdlib k8s.io/client-go" {
		t.Errorf("node-agent-discover depends on %q", got)
	}
	if got := len(dependsOn["/usr/local/bin/node-agent"]); got != 4 {
		t.Errorf("node-agent depends on %d elements, want 4 (stdlib and three modules)", got)
	}
	if p := byID["SPDXRef-go-stdlib-1.26.8"]; len(p.ExternalRefs) != 1 || p.ExternalRefs[0].ReferenceLocator != "pkg:golang/stdlib@1.26.8" {
		t.Errorf("stdlib: %+v", p)
	}
}

// FuzzReadDpkgStatus: whatever the file, the parser returns an error or
// named packages in order, and never panics.
func FuzzReadDpkgStatus(f *testing.F) {
	f.Add(status)
	f.Add("Package: a\nStatus: install ok installed\n\n\nPackage: a\nStatus: install ok installed\nArchitecture: i386\n")
	f.Add("Package: a\n Status: continued\nStatus: hold ok half-configured\n")
	f.Fuzz(func(t *testing.T, in string) {
		pkgs, err := ReadDpkgStatus(strings.NewReader(in))
		if err != nil {
			return
		}
		if len(pkgs) == 0 {
			t.Fatal("no error and no package")
		}
		for i, p := range pkgs {
			if p.Name == "" {
				t.Fatalf("package %d has no name: %+v", i, p)
			}
			if i > 0 && (pkgs[i-1].Name > p.Name || pkgs[i-1].Name == p.Name && pkgs[i-1].Architecture > p.Architecture) {
				t.Fatalf("packages out of order: %+v before %+v", pkgs[i-1], p)
			}
		}
	})
}
