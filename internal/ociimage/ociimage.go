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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"
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
		var refManifests []descriptor
		refManifests, extra, res.Referrers, err = artifactManifests(arts, manBlob)
		if err != nil {
			return Result{}, err
		}
		manifests = append(manifests, refManifests...)
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

// artifactManifests makes an OCI 1.1 artifact manifest for each of arts, with
// subject the image manifest image. It returns their index.json entries, the
// blobs to write (the empty config, the document and the manifest, for each)
// and what Result reports of them.
func artifactManifests(arts []Artifact, image blob) ([]descriptor, []blob, []Referrer, error) {
	var entries []descriptor
	var blobs []blob
	var refs []Referrer
	empty := newBlob([]byte("{}"))
	for _, a := range arts {
		doc := newBlob(a.Data)
		art := manifest{
			SchemaVersion: 2, MediaType: mediaTypeManifest, ArtifactType: a.ArtifactType,
			Config: descriptor{MediaType: mediaTypeEmpty, Digest: empty.digest, Size: 2, Data: empty.data},
			Layers: []descriptor{{MediaType: a.MediaType, Digest: doc.digest, Size: int64(len(doc.data)),
				Annotations: map[string]string{"org.opencontainers.image.title": a.Title}}},
			Subject: &descriptor{MediaType: mediaTypeManifest, Digest: image.digest, Size: int64(len(image.data))},
		}
		artBlob, err := jsonBlob(art)
		if err != nil {
			return nil, nil, nil, err
		}
		entries = append(entries, descriptor{MediaType: mediaTypeManifest, Digest: artBlob.digest, Size: int64(len(artBlob.data)), ArtifactType: a.ArtifactType})
		blobs = append(blobs, empty, doc, artBlob)
		refs = append(refs, Referrer{ManifestDigest: artBlob.digest, BlobDigest: doc.digest})
	}
	return entries, blobs, refs, nil
}
