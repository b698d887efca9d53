package docker

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"layerfs.dev/layerfs/platforms/docker/supervise"
)

func containerListLabel(label string) container.ListOptions {
	return container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", label))}
}

// untar extracts a tar stream of directories, files and links into dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Join(dir, filepath.Clean("/"+h.Name))
		if !strings.HasPrefix(name, dir+"/") {
			return errors.New("tar entry leaves the directory: " + h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(name, os.FileMode(h.Mode)&os.ModePerm)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, name)
		case tar.TypeLink:
			err = os.Link(filepath.Join(dir, filepath.Clean("/"+h.Linkname)), name)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_EXCL, os.FileMode(h.Mode)&os.ModePerm); err == nil {
				_, err = io.Copy(f, tr)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
		}
		if err != nil {
			return err
		}
	}
}

// marker makes a sleep argument unique to this test run, so that its
// processes can be found (or not) in /proc.
func marker(t *testing.T) string {
	return "3" + strconv.Itoa(os.Getpid()%1000) + "." + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
}

// sleepers lists host processes running `sleep ARG`.
func sleepers(arg string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if strings.TrimRight(string(b), "\x00") == "sleep\x00"+arg {
			if _, state, ok := supervise.ProcStat(pid); ok && state != 'Z' {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// escapers starts sleeps that leave the command's process group and parent
// every way a shell can: a background job, a setsid'd one and a
// double-forked orphan; then the command waits (or returns).
func escapers(arg, end string) []string {
	return []string{"bash", "-c", "sleep " + arg + " & setsid sleep " + arg + " & (sleep " + arg + " &); sleep 0.2; echo started; " + end}
}
