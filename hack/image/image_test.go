//go:build image

// The image test runs from `make image` (hack/image.sh), after the images are
// written: ZERODROP_IMAGE_DIR names their layouts. It needs root (chroot).

package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// TestImages checks each image as a registry and a runtime would see it:
// OCI media types throughout, a non-root user and the binary as entrypoint;
// unpacked, its entrypoint runs as that user in a chroot (no shell involved),
// and the data plane's HAProxy runs too.
func TestImages(t *testing.T) {
	dir, tag := os.Getenv("ZERODROP_IMAGE_DIR"), os.Getenv("ZERODROP_IMAGE_TAG")
	if dir == "" || tag == "" {
		t.Fatal("ZERODROP_IMAGE_DIR and ZERODROP_IMAGE_TAG are not set: run `make image`")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the image test unpacks and chroots into the images: it needs root")
	}
	for _, tc := range []struct {
		name  string
		extra [][]string // more commands to run, with what their output must contain
	}{
		{name: "zerodrop"},
		{name: "zerodrop-dataplane", extra: [][]string{{"/usr/sbin/haproxy", "-v", "HAProxy version"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := loadImage(t, filepath.Join(dir, tc.name), tc.name+":"+tag)
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.Config.User != User || !slices.Equal(cf.Config.Entrypoint, []string{BinaryPath}) {
				t.Errorf("config user %q, entrypoint %q; want %q and [%s]", cf.Config.User, cf.Config.Entrypoint, User, BinaryPath)
			}
			root := unpack(t, img)
			uid, gid, _ := strings.Cut(User, ":")
			if !strings.Contains(readFile(t, filepath.Join(root, "etc/passwd")), ":x:"+uid+":"+gid+":") {
				t.Errorf("/etc/passwd has no user %s", User)
			}
			cmds := append([][]string{{BinaryPath, "version", tag}}, tc.extra...)
			for _, c := range cmds {
				args, want := c[:len(c)-1], c[len(c)-1]
				cmd := exec.Command("chroot", append([]string{"--userspec=" + User, root}, args...)...)
				cmd.Env = cf.Config.Env
				out, err := cmd.CombinedOutput()
				if err != nil || !strings.Contains(string(out), want) {
					t.Errorf("%v in the image as %s: %v\n%s\nwant output containing %q", args, User, err, out, want)
				}
			}
		})
	}
}

// loadImage reads the layout's one image, checking the index's and the
// manifest's media types and its ref name.
func loadImage(t *testing.T, path, ref string) v1.Image {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex || len(im.Manifests) != 1 {
		t.Fatalf("index: media type %q with %d manifests, want %q with 1", im.MediaType, len(im.Manifests), types.OCIImageIndex)
	}
	desc := im.Manifests[0]
	if desc.MediaType != types.OCIManifestSchema1 || desc.Annotations["org.opencontainers.image.ref.name"] != ref {
		t.Errorf("manifest descriptor %q named %q, want %q named %q", desc.MediaType, desc.Annotations["org.opencontainers.image.ref.name"],
			types.OCIManifestSchema1, ref)
	}
	img, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("manifest %q, config %q; want %q and %q", m.MediaType, m.Config.MediaType, types.OCIManifestSchema1, types.OCIConfigJSON)
	}
	for i, l := range m.Layers {
		if l.MediaType != types.OCILayer {
			t.Errorf("layer %d: %q, want %q", i, l.MediaType, types.OCILayer)
		}
	}
	return img
}

// unpack writes the image's flattened file system into a new directory.
func unpack(t *testing.T, img v1.Image) string {
	t.Helper()
	root := t.TempDir()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return root
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, root+string(filepath.Separator)) {
			t.Fatalf("entry %q leaves the root", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, os.FileMode(h.Mode).Perm())
		case tar.TypeReg:
			err = writeEntry(p, tr, os.FileMode(h.Mode).Perm())
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		default:
			continue
		}
		if err == nil {
			err = os.Lchown(p, h.Uid, h.Gid)
		}
		if err == nil && h.Typeflag != tar.TypeSymlink {
			err = os.Chmod(p, os.FileMode(h.Mode).Perm()|stickyBits(h.Mode))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// stickyBits maps tar's setuid, setgid and sticky bits to os.FileMode's.
func stickyBits(mode int64) os.FileMode {
	var m os.FileMode
	if mode&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if mode&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if mode&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m
}

func writeEntry(p string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	return errors.Join(err, f.Close())
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
