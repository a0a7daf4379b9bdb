// Command image writes one of zerodrop's container images as an OCI image
// layout, without docker and without pulling a base image: a root filesystem
// built here from Debian's packages (hack/image.sh) and the static zerodrop
// binary, each one layer. go-containerregistry writes Docker media types by
// default; every media type here is set to the OCI one.
//
//	go run ./hack/image --rootfs DIR --binary bin/zerodrop --out bin/images/zerodrop --ref zerodrop:dev
//
// It is a build tool: the zerodrop binary does not link it.
package main

import (
	"archive/tar"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Image settings every zerodrop image has.
const (
	// User is the image's user: not root (the distroless "nonroot" ids,
	// which deploy/ and the chart's runAsUser name too).
	User       = "65532:65532"
	BinaryPath = "/zerodrop"
)

func main() {
	rootfs := flag.String("rootfs", "", "root filesystem directory (the first layer)")
	binary := flag.String("binary", "", "the static zerodrop binary (the second layer, at "+BinaryPath+")")
	out := flag.String("out", "", "OCI image layout directory to write (replaced)")
	ref := flag.String("ref", "", "the image's name:tag (org.opencontainers.image.ref.name)")
	flag.Parse()
	if *rootfs == "" || *binary == "" || *out == "" || *ref == "" {
		fmt.Fprintln(os.Stderr, "image: --rootfs, --binary, --out and --ref are required")
		os.Exit(2)
	}
	if err := write(*rootfs, *binary, *out, *ref); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

func write(rootfs, binary, out, ref string) error {
	base, err := layer(func(w *tar.Writer) error { return addTree(w, rootfs) })
	if err != nil {
		return fmt.Errorf("root filesystem layer: %w", err)
	}
	bin, err := layer(func(w *tar.Writer) error { return addFile(w, binary, strings.TrimPrefix(BinaryPath, "/"), 0o755) })
	if err != nil {
		return fmt.Errorf("binary layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, base, bin); err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.User = User
	cf.Config.Entrypoint = []string{BinaryPath}
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	cf.Config.Labels = map[string]string{"org.opencontainers.image.title": strings.SplitN(ref, ":", 2)[0]}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	p, err := layout.Write(out, idx)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref}))
}

// layer is a gzip-compressed OCI layer whose tar fill writes.
func layer(fill func(*tar.Writer) error) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() {
			tw := tar.NewWriter(pw)
			err := fill(tw)
			pw.CloseWithError(errors.Join(err, tw.Close()))
		}()
		return pr, nil
	}, tarball.WithMediaType(types.OCILayer))
}

// epoch is every entry's time: the layers depend on their content only.
var epoch = time.Unix(0, 0).UTC()

// addTree writes dir's tree in name order: directories, regular files and
// symlinks with their modes and owners; device nodes, sockets and fifos are
// left out (a container runtime makes /dev).
func addTree(w *tar.Writer, dir string) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	for _, p := range paths {
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		mode := fi.Mode()
		if !mode.IsDir() && !mode.IsRegular() && mode&fs.ModeSymlink == 0 {
			continue
		}
		link := ""
		if mode&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if mode.IsDir() {
			h.Name += "/"
		}
		h.ModTime, h.AccessTime, h.ChangeTime = epoch, time.Time{}, time.Time{}
		h.Uname, h.Gname = "", ""
		h.Format = tar.FormatPAX
		if err := w.WriteHeader(h); err != nil {
			return err
		}
		if mode.IsRegular() {
			if err := copyFile(w, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// addFile writes one file at name, owned by root, with mode.
func addFile(w *tar.Writer, src, name string, mode int64) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if err := w.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: fi.Size(), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return err
	}
	return copyFile(w, src)
}

func copyFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
