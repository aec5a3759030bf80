package ociimage

import (
	"archive/tar"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

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
