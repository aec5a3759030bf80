// Command ociimage writes a container image archive from directories, one
// layer per directory, with no container engine; see internal/ociimage.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/node-agent/node-agent/internal/ociimage"
	"github.com/node-agent/node-agent/internal/sbom"
)

// sbomInputs reads what the SBOM lists: the packages of the dpkg status file
// and the modules of each PATH_IN_IMAGE=FILE Go binary.
func sbomInputs(statusFile, distro string, binaries []string) (sbom.Image, error) {
	f, err := os.Open(statusFile)
	if err != nil {
		return sbom.Image{}, fmt.Errorf("--sbom-dpkg-status: %w", err)
	}
	defer f.Close()
	pkgs, err := sbom.ReadDpkgStatus(f)
	if err != nil {
		return sbom.Image{}, fmt.Errorf("--sbom-dpkg-status %s: %w", statusFile, err)
	}
	img := sbom.Image{Distro: distro, Packages: pkgs}
	for _, b := range binaries {
		path, file, ok := strings.Cut(b, "=")
		if !ok {
			return sbom.Image{}, fmt.Errorf("--sbom-go-binary %q is not PATH_IN_IMAGE=FILE", b)
		}
		gb, err := sbom.ReadGoBinary(file, path)
		if err != nil {
			return sbom.Image{}, err
		}
		img.Binaries = append(img.Binaries, gb)
	}
	return img, nil
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := pflag.NewFlagSet("ociimage", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, `ociimage writes a container image archive (an OCI layout with docker save's
manifest.json beside it) from directories, one layer per directory, with no
container engine. The same inputs give the same digest.

usage: ociimage --name localhost/NAME:TAG --out FILE --layer DIR|FILE.tar.gz [--layer ...] [flags]
       ociimage --layer-only --out FILE.tar.gz --layer DIR [flags]

`)
		fs.PrintDefaults()
	}
	var (
		spec    ociimage.Spec
		out     string
		epoch   string
		labels  []string
		summary string
	)
	fs.StringVar(&spec.Name, "name", "", "full image reference, such as localhost/node-agent:dev")
	fs.StringVar(&out, "out", "", "archive to write")
	fs.StringArrayVar(&spec.Layers, "layer", nil, "directory whose tree becomes the next layer (repeatable, bottom first)")
	fs.StringArrayVar(&spec.Exclude, "exclude-contents", nil, "path in a layer whose contents are left out, such as dev or proc (repeatable)")
	fs.StringArrayVar(&spec.Entrypoint, "entrypoint", nil, "entrypoint word (repeatable)")
	fs.StringArrayVar(&spec.Cmd, "cmd", nil, "command word (repeatable)")
	fs.StringArrayVar(&spec.Env, "env", nil, "KEY=VALUE (repeatable)")
	fs.StringArrayVar(&labels, "label", nil, "KEY=VALUE image label (repeatable)")
	fs.StringVar(&spec.User, "user", "", "user[:group] the container runs as")
	fs.StringVar(&spec.WorkingDir, "workdir", "", "working directory")
	fs.StringVar(&epoch, "epoch", os.Getenv("SOURCE_DATE_EPOCH"), "seconds since 1970 for every mtime and the creation time (default $SOURCE_DATE_EPOCH)")
	var sbomStatus, sbomOut, sbomDistro string
	var sbomBinaries []string
	fs.StringVar(&sbomStatus, "sbom-dpkg-status", "", "the image's dpkg status file: with it, an SPDX SBOM of the image's Debian packages and Go modules is attached to the image as an OCI artifact and written to --sbom-out")
	fs.StringArrayVar(&sbomBinaries, "sbom-go-binary", nil, "PATH_IN_IMAGE=FILE of a Go binary of the image whose modules the SBOM lists (repeatable)")
	fs.StringVar(&sbomDistro, "sbom-distro", "", "Debian release of the image's packages, for their purls (such as bookworm)")
	fs.StringVar(&sbomOut, "sbom-out", "", "file to write the SBOM to as well")
	layerOnly := fs.Bool("layer-only", false, "write only the gzipped tar of the one --layer DIR, for use as a --layer FILE later")
	fs.StringVar(&summary, "summary", "", "also write the digests and sizes to this file as KEY=VALUE lines")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	if out == "" {
		return errors.New("no --out file")
	}
	if epoch != "" {
		secs, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil {
			return fmt.Errorf("epoch %q is not a number of seconds: %w", epoch, err)
		}
		spec.Epoch = time.Unix(secs, 0).UTC()
	}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return fmt.Errorf("label %q is not KEY=VALUE", l)
		}
		if spec.Labels == nil {
			spec.Labels = map[string]string{}
		}
		spec.Labels[k] = v
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if *layerOnly {
		if len(spec.Layers) != 1 {
			return errors.New("--layer-only takes exactly one --layer DIR")
		}
		// Also writes the side file that saves later builds from
		// decompressing the layer for its diff ID.
		return ociimage.WriteLayerFile(out, spec.Layers[0], spec.Exclude, spec.Epoch)
	}
	var sbomDoc []byte
	if sbomStatus != "" {
		img, err := sbomInputs(sbomStatus, sbomDistro, sbomBinaries)
		if err != nil {
			return err
		}
		img.Name, img.Created = spec.Name, spec.Epoch
		// The version image.sh stamps into the binaries and labels the
		// image with: their build information says only "(devel)".
		img.Version = spec.Labels["org.opencontainers.image.version"]
		spec.Referrers = func(image ociimage.Descriptor) ([]ociimage.Artifact, error) {
			img.Digest = image.Digest
			doc, err := sbom.SPDX(img)
			if err != nil {
				return nil, err
			}
			sbomDoc = doc
			return []ociimage.Artifact{{ArtifactType: sbom.MediaType, MediaType: sbom.MediaType, Title: filepath.Base(sbomOut), Data: doc}}, nil
		}
	}
	// A temporary file renamed into place: bad input leaves no archive.
	tmp, err := os.CreateTemp(filepath.Dir(out), ".ociimage-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	res, err := ociimage.Write(tmp, spec)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return err
	}
	lines := fmt.Sprintf("name=%s\ndigest=%s\nid=%s\narchive_bytes=%d\nunpacked_bytes=%d\n",
		spec.Name, res.ManifestDigest, res.ConfigDigest, res.ArchiveSize, res.UnpackedSize)
	if sbomDoc != nil {
		if sbomOut != "" {
			if err := os.WriteFile(sbomOut, sbomDoc, 0o644); err != nil {
				return err
			}
		}
		lines += fmt.Sprintf("sbom_path=%s\nsbom_digest=%s\nsbom_manifest=%s\n", sbomOut, res.Referrers[0].BlobDigest, res.Referrers[0].ManifestDigest)
	}
	fmt.Print(lines)
	if summary != "" {
		return os.WriteFile(summary, []byte(lines), 0o644)
	}
	return nil
}
