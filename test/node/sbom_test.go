package node

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/node-agent/node-agent/internal/sbom"
	"github.com/node-agent/node-agent/test/testenv"
)

// checkSBOM checks the SBOM `make image` wrote against the image itself:
// the archive's index.json lists it as an artifact whose subject is the
// image manifest, its blob is the file beside the archive, and what it
// lists is what the image holds: the base layer's own dpkg status (package
// count, libvirt's and QEMU's versions) and the modules and Go release
// built into each binary of the top layer.
func checkSBOM(t *testing.T, archive string, summary testenv.ImageSummary) {
	t.Helper()
	if summary.SBOMPath == "" || summary.SBOMDigest == "" || summary.SBOMManifest == "" {
		t.Fatalf("make image wrote no SBOM into its summary: %+v", summary)
	}
	blobs := readArchive(t, archive)
	blob := func(digest string) []byte {
		b, ok := blobs["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
		if !ok {
			t.Fatalf("the archive has no blob %s", digest)
		}
		return b
	}
	var idx struct {
		Manifests []struct {
			Digest       string            `json:"digest"`
			ArtifactType string            `json:"artifactType"`
			Annotations  map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(blobs["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range idx.Manifests {
		if m.Digest == summary.SBOMManifest {
			found = m.ArtifactType == sbom.MediaType && m.Annotations["io.containerd.image.name"] == ""
		}
	}
	if !found {
		t.Fatalf("index.json does not list the SBOM artifact %s (unnamed, artifactType %s): %s", summary.SBOMManifest, sbom.MediaType, blobs["index.json"])
	}
	var art struct {
		ArtifactType string                               `json:"artifactType"`
		Layers       []struct{ MediaType, Digest string } `json:"layers"`
		Subject      *struct{ MediaType, Digest string }  `json:"subject"`
		Config       struct{ MediaType string }           `json:"config"`
	}
	if err := json.Unmarshal(blob(summary.SBOMManifest), &art); err != nil {
		t.Fatal(err)
	}
	if art.Subject == nil || art.Subject.Digest != summary.Digest || len(art.Layers) != 1 || art.Layers[0].Digest != summary.SBOMDigest {
		t.Fatalf("the SBOM artifact's subject or layer is not the image's and the SBOM's: %+v", art)
	}
	doc := blob(summary.SBOMDigest)
	if sum := sha256.Sum256(doc); "sha256:"+hex.EncodeToString(sum[:]) != summary.SBOMDigest {
		t.Fatal("the SBOM blob does not match its digest")
	}
	file, err := os.ReadFile(summary.SBOMPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(file, doc) {
		t.Errorf("%s differs from the SBOM in the archive", summary.SBOMPath)
	}
	var d struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			SPDXID      string `json:"SPDXID"`
			Name        string `json:"name"`
			VersionInfo string `json:"versionInfo"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	debs := map[string]string{}
	modules := map[string]string{}
	for _, p := range d.Packages {
		switch {
		case strings.HasPrefix(p.SPDXID, "SPDXRef-deb-"):
			debs[p.Name] = p.VersionInfo
		case strings.HasPrefix(p.SPDXID, "SPDXRef-go-module-"), strings.HasPrefix(p.SPDXID, "SPDXRef-go-stdlib-"):
			modules[p.Name] = p.VersionInfo
		}
	}

	// What the image holds: the manifest's layers, bottom first.
	var man struct{ Layers []struct{ Digest string } }
	if err := json.Unmarshal(blob(summary.Digest), &man); err != nil {
		t.Fatal(err)
	}
	status := layerFile(t, blob(man.Layers[0].Digest), "var/lib/dpkg/status")
	pkgs, err := sbom.ReadDpkgStatus(bytes.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != len(debs) {
		t.Errorf("the image's dpkg status lists %d installed packages, the SBOM %d", len(pkgs), len(debs))
	}
	// The same count without the parser that wrote the SBOM: one Status
	// line per package, its last word the state (dpkg(1)).
	installed := 0
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) == 4 && f[0] == "Status:" && f[3] != "not-installed" && f[3] != "config-files" {
			installed++
		}
	}
	if installed != len(debs) {
		t.Errorf("the image's dpkg status has %d Status lines of installed packages, the SBOM %d Debian packages", installed, len(debs))
	}
	for _, want := range []string{"libvirt0", "libvirt-daemon-driver-qemu", "qemu-system-x86"} {
		var got string
		for _, p := range pkgs {
			if p.Name == want {
				got = p.Version
			}
		}
		if got == "" || debs[want] != got {
			t.Errorf("%s: version %q in the image, %q in the SBOM", want, got, debs[want])
		}
	}
	top := blob(man.Layers[len(man.Layers)-1].Digest)
	for _, path := range []string{"/usr/local/bin/node-agent", "/usr/local/bin/node-agent-discover", "/usr/local/bin/node-agent-coordinator"} {
		binary := filepath.Join(t.TempDir(), filepath.Base(path))
		if err := os.WriteFile(binary, layerFile(t, top, strings.TrimPrefix(path, "/")), 0o755); err != nil {
			t.Fatal(err)
		}
		gb, err := sbom.ReadGoBinary(binary, path)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"stdlib": gb.GoVersion}
		for _, m := range gb.Deps {
			want[m.Path] = m.Version
		}
		if path != "/usr/local/bin/node-agent-discover" && want["k8s.io/client-go"] == "" {
			t.Errorf("the image's %s has no k8s.io/client-go in its build information: %+v", path, gb.Deps)
		}
		for p, v := range want {
			if modules[p] != v {
				t.Errorf("module %s %s of the image's %s: the SBOM says %q", p, v, path, modules[p])
			}
		}
	}
	nModules := len(modules)
	if _, ok := modules["stdlib"]; ok {
		nModules--
	}
	t.Logf("SBOM %s: SPDX %s, %d Debian packages (libvirt0 %s, qemu-system-x86 %s), %d Go modules (k8s.io/client-go %s, stdlib %s), attached as %s to image %s",
		summary.SBOMDigest, d.SPDXVersion, len(debs), debs["libvirt0"], debs["qemu-system-x86"], nModules, modules["k8s.io/client-go"], modules["stdlib"], summary.SBOMManifest, summary.Digest)
}

// readArchive reads every file of the image archive but the layers into
// memory, and the layers too: the test reads two of them.
func readArchive(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = b
	}
}

// layerFile returns the file at name in a gzipped layer.
func layerFile(t *testing.T, layer []byte, name string) []byte {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("the layer has no %s", name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimPrefix(h.Name, "./") == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}
