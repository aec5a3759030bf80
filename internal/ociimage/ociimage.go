// Package ociimage writes container image archives from directories, with no
// container engine: each directory becomes one layer, in order. `make image`
// uses it (through hack/ociimage) for node-agent's image, and the real-node
// tests for their pause and workload images.
//
// The archive is an OCI image layout (oci-layout, index.json, blobs/sha256/)
// with a Docker "docker save" manifest.json beside it that points at the same
// blobs. That is the format `docker save` writes since Docker 25, and it is
// what every loader this project names accepts: `ctr images import`, `kind
// load image-archive` (which runs ctr import), `podman load`, and `docker
// load`, old or new.
//
// The output is reproducible: the same directories give the same bytes, so
// the same image digest. Entries are sorted, every mtime is the given epoch
// (SOURCE_DATE_EPOCH, https://reproducible-builds.org/specs/source-date-epoch/),
// owners are numeric only, and gzip headers carry no time or name.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Media types of the OCI image specification
// (https://github.com/opencontainers/image-spec/blob/main/media-types.md).
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"

	// annotationRefName is the tag in index.json (OCI); annotationImageName
	// is the full name containerd's importer gives the image.
	annotationRefName   = "org.opencontainers.image.ref.name"
	annotationImageName = "io.containerd.image.name"
)

// Spec is what goes into one image.
type Spec struct {
	// Name is the full reference, for example localhost/node-agent:v1. It
	// must normalize to itself (a host part), or the CRI looks it up in a
	// registry.
	Name string
	// Layers are the image's layers, bottom first: each a directory whose
	// tree becomes a layer, or a gzipped tar file that is one already (as
	// WriteLayer writes it), which saves compressing a large tree again.
	Layers []string
	// Exclude lists paths (relative to a layer's root, such as "dev" or
	// "proc") whose contents are left out; the directory itself stays.
	Exclude    []string
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string
	WorkingDir string
	Labels     map[string]string
	// Epoch is every entry's mtime and the image's creation time.
	Epoch time.Time
	// Arch is the GOARCH-style architecture of the image (default: this
	// machine's).
	Arch string
}

// Result describes a written archive.
type Result struct {
	ManifestDigest string // the image digest: what a registry and ctr show
	ConfigDigest   string // the image ID Docker shows
	ArchiveSize    int64
	LayerSizes     []int64 // compressed
	UnpackedSize   int64   // sum of the layers' uncompressed tar streams
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type imageConfig struct {
	Created      string          `json:"created"`
	Architecture string          `json:"architecture"`
	OS           string          `json:"os"`
	Config       containerConfig `json:"config"`
	RootFS       rootFS          `json:"rootfs"`
	History      []history       `json:"history"`
}

type containerConfig struct {
	User       string            `json:"User,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Cmd        []string          `json:"Cmd,omitempty"`
	WorkingDir string            `json:"WorkingDir,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type history struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

// dockerManifest is one entry of docker save's manifest.json.
type dockerManifest struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

// blob is a content-addressed file of the archive.
type blob struct {
	digest string
	data   []byte
}

func newBlob(data []byte) blob {
	sum := sha256.Sum256(data)
	return blob{digest: "sha256:" + hex.EncodeToString(sum[:]), data: data}
}

func (b blob) path() string { return "blobs/sha256/" + strings.TrimPrefix(b.digest, "sha256:") }

// Write builds the image the spec describes and writes its archive to w.
func Write(w io.Writer, spec Spec) (Result, error) {
	if err := spec.validate(); err != nil {
		return Result{}, err
	}
	arch := spec.Arch
	if arch == "" {
		arch = runtime.GOARCH
	}
	created := spec.Epoch.UTC().Format(time.RFC3339)

	var res Result
	var blobs []blob
	var layerDescs []descriptor
	var diffIDs []string
	var hist []history
	for i, dir := range spec.Layers {
		compressed, diffID, rawSize, err := layerFrom(dir, spec.Exclude, spec.Epoch)
		if err != nil {
			return Result{}, fmt.Errorf("layer from %s: %w", dir, err)
		}
		b := newBlob(compressed)
		blobs = append(blobs, b)
		layerDescs = append(layerDescs, descriptor{MediaType: mediaTypeLayer, Digest: b.digest, Size: int64(len(b.data))})
		diffIDs = append(diffIDs, diffID)
		hist = append(hist, history{Created: created, CreatedBy: fmt.Sprintf("ociimage: layer %d", i+1)})
		res.LayerSizes = append(res.LayerSizes, int64(len(b.data)))
		res.UnpackedSize += rawSize
	}

	cfg := imageConfig{
		Created:      created,
		Architecture: arch,
		OS:           "linux",
		Config: containerConfig{
			User: spec.User, Env: spec.Env, Entrypoint: spec.Entrypoint, Cmd: spec.Cmd,
			WorkingDir: spec.WorkingDir, Labels: spec.Labels,
		},
		RootFS:  rootFS{Type: "layers", DiffIDs: diffIDs},
		History: hist,
	}
	cfgBlob, err := jsonBlob(cfg)
	if err != nil {
		return Result{}, err
	}
	man := manifest{
		SchemaVersion: 2,
		MediaType:     mediaTypeManifest,
		Config:        descriptor{MediaType: mediaTypeConfig, Digest: cfgBlob.digest, Size: int64(len(cfgBlob.data))},
		Layers:        layerDescs,
	}
	manBlob, err := jsonBlob(man)
	if err != nil {
		return Result{}, err
	}
	blobs = append(blobs, cfgBlob, manBlob)

	idx, err := json.Marshal(index{
		SchemaVersion: 2,
		MediaType:     mediaTypeIndex,
		Manifests: []descriptor{{
			MediaType: mediaTypeManifest, Digest: manBlob.digest, Size: int64(len(manBlob.data)),
			Annotations: map[string]string{annotationImageName: spec.Name, annotationRefName: tagOf(spec.Name)},
		}},
	})
	if err != nil {
		return Result{}, err
	}
	layerPaths := make([]string, len(layerDescs))
	for i := range layerDescs {
		layerPaths[i] = blobs[i].path()
	}
	dm, err := json.Marshal([]dockerManifest{{Config: cfgBlob.path(), RepoTags: []string{spec.Name}, Layers: layerPaths}})
	if err != nil {
		return Result{}, err
	}

	files := map[string][]byte{
		"oci-layout":    []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json":    idx,
		"manifest.json": dm,
	}
	for _, b := range blobs {
		files[b.path()] = b.data
	}
	cw := &countingWriter{w: w}
	if err := writeArchive(cw, files, spec.Epoch); err != nil {
		return Result{}, err
	}
	res.ManifestDigest = manBlob.digest
	res.ConfigDigest = cfgBlob.digest
	res.ArchiveSize = cw.n
	return res, nil
}

func (s Spec) validate() error {
	if s.Name == "" {
		return errors.New("no image name: give --name, for example localhost/node-agent:dev")
	}
	first := strings.SplitN(s.Name, "/", 2)[0]
	if !strings.Contains(s.Name, "/") || !(strings.ContainsAny(first, ".:") || first == "localhost") {
		return fmt.Errorf("image name %q has no registry host: the CRI would normalize it to docker.io/%s and try to pull it; use localhost/NAME:TAG or a registry of yours", s.Name, s.Name)
	}
	if tagOf(s.Name) == "" {
		return fmt.Errorf("image name %q has no tag", s.Name)
	}
	if len(s.Layers) == 0 {
		return errors.New("no layers: give at least one --layer DIR")
	}
	if s.Epoch.IsZero() {
		return errors.New("no epoch: set SOURCE_DATE_EPOCH or --epoch, so that two builds give the same digest")
	}
	return nil
}

// tagOf returns the tag of a reference ("v1" of "localhost:5000/a:v1").
func tagOf(ref string) string {
	last := ref[strings.LastIndex(ref, "/")+1:]
	if i := strings.LastIndex(last, ":"); i >= 0 {
		return last[i+1:]
	}
	return ""
}

func jsonBlob(v any) (blob, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return blob{}, err
	}
	return newBlob(data), nil
}

// WriteLayer writes the gzipped tar of dir's tree to w, as Write would make
// it a layer, for use as a Spec.Layers file later.
func WriteLayer(w io.Writer, dir string, exclude []string, epoch time.Time) error {
	if epoch.IsZero() {
		return errors.New("no epoch: set SOURCE_DATE_EPOCH or --epoch, so that two builds give the same digest")
	}
	compressed, _, _, err := layerFromDir(dir, exclude, epoch)
	if err != nil {
		return err
	}
	_, err = w.Write(compressed)
	return err
}

// layerFrom makes a layer of a directory, or reads a gzipped tar file.
func layerFrom(path string, exclude []string, epoch time.Time) ([]byte, string, int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, "", 0, err
	}
	if fi.IsDir() {
		return layerFromDir(path, exclude, epoch)
	}
	compressed, err := os.ReadFile(path)
	if err != nil {
		return nil, "", 0, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(compressed))
	if err != nil {
		return nil, "", 0, fmt.Errorf("%s is neither a directory nor a gzipped tar: %w", path, err)
	}
	raw := sha256.New()
	n, err := io.Copy(raw, zr)
	if err != nil {
		return nil, "", 0, fmt.Errorf("%s: %w", path, err)
	}
	return compressed, digestOf(raw), n, nil
}

// layerFromDir returns the gzipped tar of dir's tree, the digest of the
// uncompressed tar (the layer's diff ID) and its size.
func layerFromDir(dir string, exclude []string, epoch time.Time) ([]byte, string, int64, error) {
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.DefaultCompression)
	if err != nil {
		return nil, "", 0, err
	}
	// No name and no time in the gzip header; Go writes OS "unknown".
	raw := sha256.New()
	counter := &countingWriter{w: io.MultiWriter(zw, raw)}
	if err := writeTree(counter, dir, exclude, epoch); err != nil {
		return nil, "", 0, err
	}
	if err := zw.Close(); err != nil {
		return nil, "", 0, err
	}
	return gz.Bytes(), digestOf(raw), counter.n, nil
}

func digestOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// writeTree writes dir's tree as a tar stream, in lexical order, with
// numeric owners, hard links kept as links, and every mtime set to epoch.
func writeTree(w io.Writer, dir string, exclude []string, epoch time.Time) error {
	excluded := map[string]bool{}
	for _, e := range exclude {
		excluded[strings.Trim(filepath.ToSlash(filepath.Clean(e)), "/")] = true
	}
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	err := walkSorted(dir, func(path, rel string, fi fs.FileInfo) (skipContents bool, err error) {
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return false, fmt.Errorf("%s: %w", path, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if hdr.Linkname, err = os.Readlink(path); err != nil {
				return false, err
			}
		}
		if fi.Mode()&fs.ModeSocket != 0 {
			return false, nil // sockets cannot be archived and are never content
		}
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = epoch, time.Time{}, time.Time{}
		// PAX so that long names and large ids survive; no time records.
		hdr.Format = tar.FormatPAX
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
			if fi.Mode().IsRegular() && st.Nlink > 1 {
				key := inode{uint64(st.Dev), uint64(st.Ino)}
				if first, ok := seen[key]; ok {
					hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				} else {
					seen[key] = rel
				}
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return false, fmt.Errorf("%s: %w", path, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			f, err := os.Open(path)
			if err != nil {
				return false, err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return false, fmt.Errorf("%s: %w", path, err)
			}
		}
		return fi.IsDir() && excluded[rel], nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// walkSorted calls fn for every entry under root (not root itself) in
// lexical order of the slash-separated relative path, parents first.
func walkSorted(root string, fn func(path, rel string, fi fs.FileInfo) (bool, error)) error {
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			r := e.Name()
			if rel != "" {
				r = rel + "/" + e.Name()
			}
			fi, err := os.Lstat(path)
			if err != nil {
				return err
			}
			skip, err := fn(path, r, fi)
			if err != nil {
				return err
			}
			if fi.IsDir() && !skip {
				if err := walk(path, r); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(root, "")
}

// writeArchive writes the outer tar: directories first, then files, sorted.
func writeArchive(w io.Writer, files map[string][]byte, epoch time.Time) error {
	tw := tar.NewWriter(w)
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		data := files[n]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	return tw.Close()
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
