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
`

func TestReadDpkgStatus(t *testing.T) {
	pkgs, err := ReadDpkgStatus(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	want := []DebPackage{
		{Name: "base-files", Version: "12.4+deb12u8", Architecture: "amd64"},
		{Name: "libvirt0", Version: "9.0.0-4+deb12u2", Architecture: "amd64", Source: "libvirt"},
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
	for _, bad := range []string{"", "Package: x\nno colon here\n", "Package: x\nStatus: deinstall ok config-files\n"} {
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
