package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func writeTestTree(t *testing.T, dir string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "usr/bin"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "dev/pts"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "dev/null-ish"), []byte("x"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "usr/bin/tool"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(os.Link(filepath.Join(dir, "usr/bin/tool"), filepath.Join(dir, "usr/bin/tool2")))
	must(os.Symlink("tool", filepath.Join(dir, "usr/bin/link")))
	must(os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o600))
}

func build(t *testing.T, dirs ...string) (Result, []byte) {
	t.Helper()
	var buf bytes.Buffer
	res, err := Write(&buf, Spec{
		Name: "localhost/test:v1", Layers: dirs, Exclude: []string{"dev"},
		Entrypoint: []string{"/usr/bin/tool"}, Epoch: time.Unix(1700000000, 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	return res, buf.Bytes()
}

func TestSameInputSameDigest(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeTestTree(t, a)
	// The second tree is written later, with other mtimes and inode numbers.
	time.Sleep(10 * time.Millisecond)
	writeTestTree(t, b)
	if err := os.Chtimes(filepath.Join(b, "a"), time.Unix(1, 0), time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	ra, archA := build(t, a)
	rb, archB := build(t, b)
	if ra.ManifestDigest != rb.ManifestDigest || !bytes.Equal(archA, archB) {
		t.Fatalf("two builds of equal trees differ: %s vs %s", ra.ManifestDigest, rb.ManifestDigest)
	}
	if err := os.WriteFile(filepath.Join(b, "a"), []byte("b"), 0o600); err != nil {
		t.Fatal(err)
	}
	if rc, _ := build(t, b); rc.ManifestDigest == ra.ManifestDigest {
		t.Fatal("changing a file's content did not change the digest")
	}
}

// TestArchiveIsConsistent reads the archive as a loader would: index.json
// and manifest.json point at blobs whose content matches their digests, and
// the layer holds the tree with links kept and excluded contents left out.
func TestArchiveIsConsistent(t *testing.T) {
	dir := t.TempDir()
	writeTestTree(t, dir)
	res, arch := build(t, dir, dir)
	files := readTar(t, bytes.NewReader(arch))
	for name, data := range files {
		if hex, ok := strings.CutPrefix(name, "blobs/sha256/"); ok && hex != "" {
			if got := sha(data); got != "sha256:"+hex {
				t.Errorf("blob %s has digest %s", name, got)
			}
		}
	}
	var idx index
	mustJSON(t, files["index.json"], &idx)
	if len(idx.Manifests) != 1 || idx.Manifests[0].Digest != res.ManifestDigest ||
		idx.Manifests[0].Annotations[annotationImageName] != "localhost/test:v1" ||
		idx.Manifests[0].Annotations[annotationRefName] != "v1" {
		t.Fatalf("index.json: %s", files["index.json"])
	}
	var man manifest
	mustJSON(t, files[blobPath(res.ManifestDigest)], &man)
	var dm []dockerManifest
	mustJSON(t, files["manifest.json"], &dm)
	if len(dm) != 1 || dm[0].Config != blobPath(man.Config.Digest) || len(dm[0].Layers) != 2 || dm[0].RepoTags[0] != "localhost/test:v1" {
		t.Fatalf("manifest.json: %s", files["manifest.json"])
	}
	var cfg imageConfig
	mustJSON(t, files[blobPath(man.Config.Digest)], &cfg)
	if len(cfg.RootFS.DiffIDs) != 2 || cfg.Config.Entrypoint[0] != "/usr/bin/tool" {
		t.Fatalf("config: %s", files[blobPath(man.Config.Digest)])
	}
	zr, err := gzip.NewReader(bytes.NewReader(files[blobPath(man.Layers[0].Digest)]))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if got := sha(raw); got != cfg.RootFS.DiffIDs[0] {
		t.Errorf("diff_id %s, uncompressed layer %s", cfg.RootFS.DiffIDs[0], got)
	}
	hdrs := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		hdrs[h.Name] = h
		if !h.ModTime.Equal(time.Unix(1700000000, 0)) {
			t.Errorf("%s has mtime %s", h.Name, h.ModTime)
		}
	}
	if _, ok := hdrs["dev/"]; !ok {
		t.Error("the excluded directory itself is missing")
	}
	if _, ok := hdrs["dev/null-ish"]; ok {
		t.Error("the excluded directory's contents are in the layer")
	}
	if h := hdrs["usr/bin/tool2"]; h == nil || h.Typeflag != tar.TypeLink || h.Linkname != "usr/bin/tool" {
		t.Errorf("hard link: %+v", h)
	}
	if h := hdrs["usr/bin/link"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "tool" {
		t.Errorf("symlink: %+v", h)
	}
	if h := hdrs["a"]; h == nil || h.Mode&0o777 != 0o600 {
		t.Errorf("mode: %+v", h)
	}
}

func TestBadSpec(t *testing.T) {
	dir := t.TempDir()
	for name, spec := range map[string]Spec{
		"no host":   {Name: "node-agent:v1", Layers: []string{dir}, Epoch: time.Unix(1, 0)},
		"no tag":    {Name: "localhost/node-agent", Layers: []string{dir}, Epoch: time.Unix(1, 0)},
		"no layers": {Name: "localhost/node-agent:v1", Epoch: time.Unix(1, 0)},
		"no epoch":  {Name: "localhost/node-agent:v1", Layers: []string{dir}},
		"no dir":    {Name: "localhost/node-agent:v1", Layers: []string{filepath.Join(dir, "missing")}, Epoch: time.Unix(1, 0)},
	} {
		if _, err := Write(io.Discard, spec); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func readTar(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = data
	}
}

func mustJSON(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// buildSpec builds like build, from a spec the test changes.
func buildSpec(t *testing.T, layers ...string) (Result, []byte, error) {
	t.Helper()
	var buf bytes.Buffer
	res, err := Write(&buf, Spec{
		Name: "localhost/test:v1", Layers: layers, Exclude: []string{"dev"},
		Entrypoint: []string{"/usr/bin/tool"}, Epoch: time.Unix(1700000000, 0),
	})
	return res, buf.Bytes(), err
}

// diffIDs returns the diff IDs in an archive's image config.
func diffIDs(t *testing.T, arch []byte) []string {
	t.Helper()
	files := readTar(t, bytes.NewReader(arch))
	var dm []dockerManifest
	mustJSON(t, files["manifest.json"], &dm)
	var cfg imageConfig
	mustJSON(t, files[dm[0].Config], &cfg)
	return cfg.RootFS.DiffIDs
}

func readSide(t *testing.T, layerPath string) layerInfo {
	t.Helper()
	data, err := os.ReadFile(sideFile(layerPath))
	if err != nil {
		t.Fatal(err)
	}
	var info layerInfo
	mustJSON(t, data, &info)
	return info
}

// TestLayerFileSideFile: a layer file that WriteLayerFile wrote gives the
// same archive as its directory; Write takes the layer's diff ID from the
// side file beside it rather than decompressing the layer, and a missing,
// stale or unreadable side file is recomputed and written again.
func TestLayerFileSideFile(t *testing.T) {
	dir := t.TempDir()
	writeTestTree(t, dir)
	layerPath := filepath.Join(t.TempDir(), "base.layer.tar.gz")
	if err := WriteLayerFile(layerPath, dir, []string{"dev"}, time.Unix(1700000000, 0)); err != nil {
		t.Fatal(err)
	}
	fromDir, archDir := build(t, dir)
	fromFile, archFile := build(t, layerPath)
	if fromDir.ManifestDigest != fromFile.ManifestDigest || !bytes.Equal(archDir, archFile) {
		t.Fatalf("a layer file gives %s, its directory %s", fromFile.ManifestDigest, fromDir.ManifestDigest)
	}
	compressed, err := os.ReadFile(layerPath)
	if err != nil {
		t.Fatal(err)
	}
	want := layerInfo{Digest: sha(compressed), Size: int64(len(compressed)), DiffID: diffIDs(t, archDir)[0], UnpackedSize: fromDir.UnpackedSize}
	if got := readSide(t, layerPath); got != want {
		t.Fatalf("side file %+v, want %+v", got, want)
	}

	// The side file is what Write believes: a diff ID that is not the
	// layer's, under the layer's own digest, goes into the config.
	fake := want
	fake.DiffID = "sha256:" + strings.Repeat("ab", 32)
	fake.UnpackedSize = 42
	if err := writeSideFile(layerPath, fake); err != nil {
		t.Fatal(err)
	}
	res, arch, err := buildSpec(t, layerPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := diffIDs(t, arch)[0]; got != fake.DiffID || res.UnpackedSize != 42 {
		t.Fatalf("diff ID %s and unpacked size %d: the side file was not used", got, res.UnpackedSize)
	}

	for name, side := range map[string]func() error{
		"missing": func() error { return os.Remove(sideFile(layerPath)) },
		"stale": func() error {
			// Another layer's: as after the layer file was replaced.
			stale := want
			stale.Digest = "sha256:" + strings.Repeat("cd", 32)
			stale.DiffID = fake.DiffID
			return writeSideFile(layerPath, stale)
		},
		"wrong size": func() error {
			wrong := fake
			wrong.Size++
			return writeSideFile(layerPath, wrong)
		},
		"bad diff ID": func() error {
			bad := want
			bad.DiffID = "sha256:xyz"
			return writeSideFile(layerPath, bad)
		},
		"not JSON": func() error { return os.WriteFile(sideFile(layerPath), []byte("sha256:"), 0o600) },
		"empty":    func() error { return os.WriteFile(sideFile(layerPath), nil, 0o600) },
	} {
		if err := side(); err != nil {
			t.Fatal(err)
		}
		res, arch, err := buildSpec(t, layerPath)
		if err != nil {
			t.Fatalf("%s side file: %v", name, err)
		}
		if res.ManifestDigest != fromDir.ManifestDigest || !bytes.Equal(arch, archDir) {
			t.Errorf("%s side file: digest %s, want %s", name, res.ManifestDigest, fromDir.ManifestDigest)
		}
		if got := readSide(t, layerPath); got != want {
			t.Errorf("%s side file: rewritten as %+v, want %+v", name, got, want)
		}
	}
}

// TestBadLayerFile: a layer file that is not a gzipped tar fails the build
// with the file named, before anything is written.
func TestBadLayerFile(t *testing.T) {
	dir := t.TempDir()
	writeTestTree(t, dir)
	good := filepath.Join(t.TempDir(), "good.tar.gz")
	if err := WriteLayerFile(good, dir, nil, time.Unix(1700000000, 0)); err != nil {
		t.Fatal(err)
	}
	compressed, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"plain tar":     []byte("usr/bin/tool\x00 not gzip at all"),
		"truncated":     compressed[:len(compressed)/2],
		"garbage after": append(append([]byte{}, compressed...), "trailing"...),
	} {
		path := filepath.Join(t.TempDir(), "layer.tar.gz")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, arch, err := buildSpec(t, dir, path)
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %v does not name %s", name, err, path)
		}
		if len(arch) != 0 {
			t.Errorf("%s: %d bytes written before the error", name, len(arch))
		}
		if _, err := os.Stat(sideFile(path)); !os.IsNotExist(err) {
			t.Errorf("%s: side file written for a bad layer (%v)", name, err)
		}
	}
}

// TestMemoryDoesNotGrowWithLayers: a layer is compressed to a file and
// copied from it, never held whole in memory.
func TestMemoryDoesNotGrowWithLayers(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 2 x 24 MiB")
	}
	const size = 24 << 20
	dir := t.TempDir()
	// Random bytes, so that the compressed layer is as large.
	data := make([]byte, size)
	if _, err := rand.NewChaCha8([32]byte{}).Read(data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "blob"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	// Another epoch, so another layer than dir's, not one blob for both.
	layerPath := filepath.Join(t.TempDir(), "layer.tar.gz")
	if err := WriteLayerFile(layerPath, dir, nil, time.Unix(2, 0)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(sideFile(layerPath)); err != nil { // decompressed, then
		t.Fatal(err)
	}
	data = nil
	out, err := os.Create(filepath.Join(t.TempDir(), "image.tar"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res, err := Write(out, Spec{Name: "localhost/big:v1", Layers: []string{dir, layerPath}, Epoch: time.Unix(1, 0)})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if res.ArchiveSize < 2*size {
		t.Fatalf("archive of %d bytes; the layers are %d each", res.ArchiveSize, size)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/3 {
		t.Errorf("Write allocated %d MiB for two %d MiB layers", alloc>>20, size>>20)
	}
}
