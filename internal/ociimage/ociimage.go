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
	"bufio"
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
	// WriteLayerFile writes it), which saves compressing a large tree
	// again. Such a file's diff ID comes from the side file beside it
	// (FILE.diffid.json) when that names the file's digest; otherwise Write
	// decompresses the file and writes the side file.
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
	// Referrers, when set, is called with the image manifest's descriptor
	// once it is known and returns artifacts about the image (its SBOM).
	// Each is written as an OCI 1.1 artifact manifest whose subject is the
	// image manifest, listed in index.json with its artifactType and no
	// name, so that tools that load images by name pass it by.
	Referrers func(image Descriptor) ([]Artifact, error)
}

// Descriptor names a blob of the archive.
type Descriptor struct {
	MediaType string
	Digest    string
	Size      int64
}

// Artifact is one document attached to the image (Spec.Referrers).
type Artifact struct {
	// ArtifactType is the artifact manifest's artifactType, such as
	// application/spdx+json; MediaType is its one layer's.
	ArtifactType, MediaType string
	// Title is the layer's org.opencontainers.image.title annotation, a
	// file name.
	Title string
	Data  []byte
}

// Result describes a written archive.
type Result struct {
	ManifestDigest string // the image digest: what a registry and ctr show
	ConfigDigest   string // the image ID Docker shows
	ArchiveSize    int64
	LayerSizes     []int64 // compressed
	UnpackedSize   int64   // sum of the layers' uncompressed tar streams
	// Referrers are the artifact manifests written for Spec.Referrers, in
	// order: each manifest's digest and its document's.
	Referrers []Referrer
}

// Referrer is one artifact written beside the image.
type Referrer struct {
	ManifestDigest, BlobDigest string
}

type descriptor struct {
	MediaType    string            `json:"mediaType"`
	Digest       string            `json:"digest"`
	Size         int64             `json:"size"`
	ArtifactType string            `json:"artifactType,omitempty"`
	Data         []byte            `json:"data,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
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
	ArtifactType  string       `json:"artifactType,omitempty"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
	Subject       *descriptor  `json:"subject,omitempty"`
}

// The empty config of an artifact manifest (image-spec 1.1, "Guidelines
// for artifact usage"): the two bytes {}.
const mediaTypeEmpty = "application/vnd.oci.empty.v1+json"

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

// blob is a small content-addressed file of the archive (config, manifest),
// held in memory.
type blob struct {
	digest string
	data   []byte
}

func newBlob(data []byte) blob {
	sum := sha256.Sum256(data)
	return blob{digest: "sha256:" + hex.EncodeToString(sum[:]), data: data}
}

func (b blob) path() string { return blobPath(b.digest) }

func blobPath(digest string) string { return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:") }

// layerInfo is what the manifest and the config say of one layer. It is
// also the side file (sideFile) kept beside a layer file, so that a build
// need not decompress the layer again for its diff ID.
type layerInfo struct {
	Digest       string `json:"digest"` // of the gzipped tar: the blob's name
	Size         int64  `json:"size"`
	DiffID       string `json:"diffID"` // of the uncompressed tar
	UnpackedSize int64  `json:"unpackedSize"`
}

// layer is one layer of the image: its gzipped tar, in a file that stays
// open until the archive is written, and what is known of it.
type layer struct {
	layerInfo
	file *os.File
	temp bool // file is Write's own and is removed afterwards
}

func (l *layer) close() {
	l.file.Close()
	if l.temp {
		os.Remove(l.file.Name())
	}
}

// Write builds the image the spec describes and writes its archive to w.
//
// Memory use does not grow with the layers: a directory is compressed to a
// temporary file (in os.TempDir) while its digests are computed, and the
// archive copies each layer from its file. Every layer is made and read
// before the first byte goes to w, so bad input fails with nothing written.
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
	var layers []*layer
	defer func() {
		for _, l := range layers {
			l.close()
		}
	}()
	var layerDescs []descriptor
	var diffIDs []string
	var hist []history
	for i, path := range spec.Layers {
		l, err := layerFrom(path, spec.Exclude, spec.Epoch)
		if err != nil {
			return Result{}, fmt.Errorf("layer from %s: %w", path, err)
		}
		layers = append(layers, l)
		layerDescs = append(layerDescs, descriptor{MediaType: mediaTypeLayer, Digest: l.Digest, Size: l.Size})
		diffIDs = append(diffIDs, l.DiffID)
		hist = append(hist, history{Created: created, CreatedBy: fmt.Sprintf("ociimage: layer %d", i+1)})
		res.LayerSizes = append(res.LayerSizes, l.Size)
		res.UnpackedSize += l.UnpackedSize
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

	manifests := []descriptor{{
		MediaType: mediaTypeManifest, Digest: manBlob.digest, Size: int64(len(manBlob.data)),
		Annotations: map[string]string{annotationImageName: spec.Name, annotationRefName: tagOf(spec.Name)},
	}}
	var extra []blob
	if spec.Referrers != nil {
		arts, err := spec.Referrers(Descriptor{MediaType: mediaTypeManifest, Digest: manBlob.digest, Size: int64(len(manBlob.data))})
		if err != nil {
			return Result{}, err
		}
		empty := newBlob([]byte("{}"))
		for _, a := range arts {
			doc := newBlob(a.Data)
			art := manifest{
				SchemaVersion: 2, MediaType: mediaTypeManifest, ArtifactType: a.ArtifactType,
				Config: descriptor{MediaType: mediaTypeEmpty, Digest: empty.digest, Size: 2, Data: empty.data},
				Layers: []descriptor{{MediaType: a.MediaType, Digest: doc.digest, Size: int64(len(doc.data)),
					Annotations: map[string]string{"org.opencontainers.image.title": a.Title}}},
				Subject: &descriptor{MediaType: mediaTypeManifest, Digest: manBlob.digest, Size: int64(len(manBlob.data))},
			}
			artBlob, err := jsonBlob(art)
			if err != nil {
				return Result{}, err
			}
			manifests = append(manifests, descriptor{MediaType: mediaTypeManifest, Digest: artBlob.digest, Size: int64(len(artBlob.data)), ArtifactType: a.ArtifactType})
			extra = append(extra, empty, doc, artBlob)
			res.Referrers = append(res.Referrers, Referrer{ManifestDigest: artBlob.digest, BlobDigest: doc.digest})
		}
	}
	idx, err := json.Marshal(index{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: manifests})
	if err != nil {
		return Result{}, err
	}
	layerPaths := make([]string, len(layers))
	for i, l := range layers {
		layerPaths[i] = blobPath(l.Digest)
	}
	dm, err := json.Marshal([]dockerManifest{{Config: cfgBlob.path(), RepoTags: []string{spec.Name}, Layers: layerPaths}})
	if err != nil {
		return Result{}, err
	}

	files := map[string]archiveFile{
		"oci-layout":    {data: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		"index.json":    {data: idx},
		"manifest.json": {data: dm},
	}
	// A layer given twice is one blob.
	for _, l := range layers {
		if _, ok := files[blobPath(l.Digest)]; !ok {
			files[blobPath(l.Digest)] = archiveFile{layer: l}
		}
	}
	for _, b := range append([]blob{cfgBlob, manBlob}, extra...) {
		files[b.path()] = archiveFile{data: b.data}
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
		return errNoEpoch
	}
	return nil
}

var errNoEpoch = errors.New("no epoch: set SOURCE_DATE_EPOCH or --epoch, so that two builds give the same digest")

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
// it a layer. It streams: on error, w may hold part of the layer. For a
// layer file to give Write later, use WriteLayerFile.
func WriteLayer(w io.Writer, dir string, exclude []string, epoch time.Time) error {
	if epoch.IsZero() {
		return errNoEpoch
	}
	_, err := compressTree(w, dir, exclude, epoch)
	return err
}

// WriteLayerFile writes the gzipped tar of dir's tree to the file path, as
// Write would make it a layer, for use as a Spec.Layers file later. It
// writes a temporary file beside path and renames it, so path is either
// complete or untouched, and then the side file that saves Write from
// decompressing the layer for its diff ID (path + ".diffid.json").
func WriteLayerFile(path, dir string, exclude []string, epoch time.Time) error {
	if epoch.IsZero() {
		return errNoEpoch
	}
	var info layerInfo
	err := writeFileAtomic(path, func(w io.Writer) error {
		var err error
		info, err = compressTree(w, dir, exclude, epoch)
		return err
	})
	if err != nil {
		return err
	}
	return writeSideFile(path, info)
}

// sideFile is the file beside a layer file that holds its layerInfo.
func sideFile(layerPath string) string { return layerPath + ".diffid.json" }

func writeSideFile(layerPath string, info layerInfo) error {
	data, err := json.Marshal(info)
	if err != nil {
		return err
	}
	return writeFileAtomic(sideFile(layerPath), func(w io.Writer) error {
		_, err := w.Write(append(data, '\n'))
		return err
	})
}

// readSideFile returns the layerInfo of the side file of the layer file at
// layerPath, if there is one that describes a layer of that digest and size.
func readSideFile(layerPath, digest string, size int64) (layerInfo, bool) {
	data, err := os.ReadFile(sideFile(layerPath))
	if err != nil {
		return layerInfo{}, false
	}
	var info layerInfo
	if err := json.Unmarshal(data, &info); err != nil {
		return layerInfo{}, false
	}
	if info.Digest != digest || info.Size != size || !validDigest(info.DiffID) || info.UnpackedSize <= 0 {
		return layerInfo{}, false
	}
	return info, true
}

func validDigest(d string) bool {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != sha256.Size*2 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil && h == strings.ToLower(h)
}

// writeFileAtomic writes path through a temporary file in its directory,
// renamed over path only when write and close succeed.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".ociimage-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	bw := bufio.NewWriterSize(tmp, 1<<16)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// layerFrom makes a layer of a directory, or opens a gzipped tar file.
func layerFrom(path string, exclude []string, epoch time.Time) (*layer, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return layerFromDir(path, exclude, epoch)
	}
	return layerFromFile(path)
}

// layerFromDir compresses dir's tree into a temporary file, computing the
// digests on the way.
func layerFromDir(dir string, exclude []string, epoch time.Time) (*layer, error) {
	f, err := os.CreateTemp("", "ociimage-layer-*.tar.gz")
	if err != nil {
		return nil, err
	}
	l := &layer{file: f, temp: true}
	bw := bufio.NewWriterSize(f, 1<<16)
	l.layerInfo, err = compressTree(bw, dir, exclude, epoch)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// layerFromFile opens a gzipped tar file as a layer. Its digest is always
// computed, as it names the blob; its diff ID comes from the side file when
// that describes this very file, and otherwise from decompressing it, after
// which the side file is written for the next build (if the directory is
// not writable, the next build decompresses again).
func layerFromFile(path string) (_ *layer, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	sum := sha256.New()
	size, err := io.Copy(sum, f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	digest := digestOf(sum)
	if info, ok := readSideFile(path, digest, size); ok {
		return &layer{layerInfo: info, file: f}, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(bufio.NewReaderSize(f, 1<<16))
	if err != nil {
		return nil, fmt.Errorf("%s is neither a directory nor a gzipped tar: %w", path, err)
	}
	raw := sha256.New()
	n, err := io.Copy(raw, zr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	info := layerInfo{Digest: digest, Size: size, DiffID: digestOf(raw), UnpackedSize: n}
	_ = writeSideFile(path, info) // a cache only: the build does not need it
	return &layer{layerInfo: info, file: f}, nil
}

// compressTree writes the gzipped tar of dir's tree to w and returns the
// digest and size of what it wrote and of the tar inside (the diff ID), all
// computed in the one pass.
func compressTree(w io.Writer, dir string, exclude []string, epoch time.Time) (layerInfo, error) {
	gzSum := sha256.New()
	gzOut := &countingWriter{w: io.MultiWriter(w, gzSum)}
	// No name and no time in the gzip header; Go writes OS "unknown".
	zw, err := gzip.NewWriterLevel(gzOut, gzip.DefaultCompression)
	if err != nil {
		return layerInfo{}, err
	}
	raw := sha256.New()
	counter := &countingWriter{w: io.MultiWriter(zw, raw)}
	if err := writeTree(counter, dir, exclude, epoch); err != nil {
		return layerInfo{}, err
	}
	if err := zw.Close(); err != nil {
		return layerInfo{}, err
	}
	return layerInfo{Digest: digestOf(gzSum), Size: gzOut.n, DiffID: digestOf(raw), UnpackedSize: counter.n}, nil
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

// archiveFile is one file of the outer tar: small data, or a layer's file.
type archiveFile struct {
	data  []byte
	layer *layer
}

// writeArchive writes the outer tar: directories first, then files, sorted.
// A layer is copied from its file and checked against its digest on the way.
func writeArchive(w io.Writer, files map[string]archiveFile, epoch time.Time) error {
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
	buf := make([]byte, 1<<18)
	for _, n := range names {
		f := files[n]
		size := int64(len(f.data))
		if f.layer != nil {
			size = f.layer.Size
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: size, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if f.layer == nil {
			if _, err := tw.Write(f.data); err != nil {
				return err
			}
			continue
		}
		if err := copyLayer(tw, f.layer, buf); err != nil {
			return err
		}
	}
	return tw.Close()
}

// copyLayer copies a layer's file to w, failing if it is no longer the file
// that was measured.
func copyLayer(w io.Writer, l *layer, buf []byte) error {
	if _, err := l.file.Seek(0, io.SeekStart); err != nil {
		return err
	}
	sum := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(w, sum), io.LimitReader(l.file, l.Size+1), buf)
	if err != nil {
		return fmt.Errorf("copying %s: %w", l.file.Name(), err)
	}
	if n != l.Size || digestOf(sum) != l.Digest {
		return fmt.Errorf("%s changed while the image was written", l.file.Name())
	}
	return nil
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
