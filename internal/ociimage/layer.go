package ociimage

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

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
