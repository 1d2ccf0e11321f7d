package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// imageSpec describes a one-layer image made from local files: the sandbox
// (pause) image and the small test images. No base image is pulled: no
// registry is reachable, and the test images are static binaries.
type imageSpec struct {
	name       string            // reference, e.g. kubewasm.local/pause:1
	files      []imageFile       // regular files
	symlinks   map[string]string // path in image -> target
	entrypoint []string
	cmd        []string
	user       string
}

type imageFile struct {
	src, dst string
	mode     int64
}

// runImage is the `image` subcommand: it writes a docker-archive tarball that
// `ctr images import` (and podman/skopeo) load.
func runImage(args []string) int {
	fs := flag.NewFlagSet("kubewasm-controlplane image", flag.ExitOnError)
	out := fs.String("out", "", "archive to write (required)")
	name := fs.String("name", "", "image reference, e.g. kubewasm.local/busybox:1 (required)")
	entrypoint := fs.String("entrypoint", "", "entrypoint as a JSON array")
	cmdArg := fs.String("cmd", "", "command as a JSON array")
	user := fs.String("user", "", "user, e.g. 65532:65532")
	spec := imageSpec{symlinks: map[string]string{}}
	fs.Func("add", "SRC:DST[:MODE] a file (repeatable; MODE octal, default 0755)", func(s string) error {
		parts := strings.Split(s, ":")
		if len(parts) < 2 || len(parts) > 3 {
			return errors.New("want SRC:DST[:MODE]")
		}
		f := imageFile{src: parts[0], dst: parts[1], mode: 0o755}
		if len(parts) == 3 {
			m, err := strconv.ParseInt(parts[2], 8, 32)
			if err != nil {
				return err
			}
			f.mode = m
		}
		spec.files = append(spec.files, f)
		return nil
	})
	fs.Func("symlink", "DST=TARGET a symbolic link (repeatable)", func(s string) error {
		dst, target, ok := strings.Cut(s, "=")
		if !ok {
			return errors.New("want DST=TARGET")
		}
		spec.symlinks[dst] = target
		return nil
	})
	_ = fs.Parse(args)
	if *out == "" || *name == "" {
		fs.Usage()
		return 2
	}
	spec.name, spec.user = *name, *user
	for _, j := range []struct {
		s   string
		dst *[]string
	}{{*entrypoint, &spec.entrypoint}, {*cmdArg, &spec.cmd}} {
		if j.s != "" {
			if err := json.Unmarshal([]byte(j.s), j.dst); err != nil {
				logf("image: bad JSON array %q: %v", j.s, err)
				return 2
			}
		}
	}
	if err := writeImageArchive(*out, spec); err != nil {
		logf("image: %v", err)
		return 1
	}
	return 0
}

// writeImageArchive writes spec as a docker-archive (`docker save` layout:
// manifest.json, the config blob, one uncompressed layer).
func writeImageArchive(out string, spec imageSpec) error {
	layer, err := buildLayer(spec)
	if err != nil {
		return err
	}
	diffID := sha256.Sum256(layer)
	diffHex := hex.EncodeToString(diffID[:])
	config := map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      "1970-01-01T00:00:00Z",
		"config": map[string]any{
			"Entrypoint": spec.entrypoint,
			"Cmd":        spec.cmd,
			"User":       spec.user,
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + diffHex}},
	}
	configJSON, err := json.Marshal(config)
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(configJSON)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	layerName := diffHex + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{
		"Config": configName, "RepoTags": []string{spec.name}, "Layers": []string{layerName},
	}})
	if err != nil {
		return err
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct {
		name string
		data []byte
	}{{configName, configJSON}, {layerName, layer}, {"manifest.json", manifest}} {
		if dir := path.Dir(e.name); dir != "." {
			if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.data))}); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return writeFileAtomic(out, buf.Bytes(), 0o644)
}

// buildLayer makes the layer tarball: parent directories, files, symlinks,
// in a stable order with a fixed timestamp so the same inputs give the same
// image ID.
func buildLayer(spec imageSpec) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := map[string]bool{}
	var addDirs func(p string) error
	addDirs = func(p string) error {
		d := path.Dir(p)
		if d == "." || d == "/" || dirs[d] {
			return nil
		}
		if err := addDirs(d); err != nil {
			return err
		}
		dirs[d] = true
		return tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(d, "/") + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch})
	}
	// Every image gets a /tmp (writable scratch for programs that want one).
	if err := tw.WriteHeader(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: epoch}); err != nil {
		return nil, err
	}
	files := append([]imageFile(nil), spec.files...)
	sort.Slice(files, func(i, j int) bool { return files[i].dst < files[j].dst })
	for _, f := range files {
		data, err := os.ReadFile(f.src)
		if err != nil {
			return nil, err
		}
		if err := addDirs(f.dst); err != nil {
			return nil, err
		}
		h := &tar.Header{Name: strings.TrimPrefix(f.dst, "/"), Typeflag: tar.TypeReg, Mode: f.mode, Size: int64(len(data)), ModTime: epoch}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, bytes.NewReader(data)); err != nil {
			return nil, err
		}
	}
	links := make([]string, 0, len(spec.symlinks))
	for l := range spec.symlinks {
		links = append(links, l)
	}
	sort.Strings(links)
	for _, l := range links {
		if err := addDirs(l); err != nil {
			return nil, err
		}
		h := &tar.Header{Name: strings.TrimPrefix(l, "/"), Typeflag: tar.TypeSymlink, Linkname: spec.symlinks[l], Mode: 0o777, ModTime: epoch}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// describe is for logs.
func (s imageSpec) describe() string {
	return fmt.Sprintf("%s (%d files)", s.name, len(s.files))
}
