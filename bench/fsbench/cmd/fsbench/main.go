// Command fsbench runs the twelve cells on a fresh workspace mount and in a
// plain directory on the same file system, and prints the comparison table.
// The lead's CLI wires the same package as `layerfs bench fs`.
//
//	fsbench -dir /tmp/fsb                  # on the file system of /tmp
//	fsbench -loop ext4:8G                  # on a loop-mounted journaled ext4
//	fsbench -loop xfs:8G                   # on a loop-mounted XFS (reflinks)
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"

	"layerfs.dev/layerfs/bench/fsbench"
	"layerfs.dev/layerfs/fs"
)

func main() {
	dir := flag.String("dir", "/tmp/fsbench", "scratch directory on the file system under test")
	samples := flag.Int("samples", 5, "samples per arm and cell")
	cells := flag.String("cells", "", "comma-separated cells (default all)")
	loop := flag.String("loop", "", "FSTYPE:SIZE: make a file system image (ext4 with a journal, or xfs), loop-mount it under -dir and run there")
	noPT := flag.Bool("no-passthrough", false, "serve file data through the daemon")
	cpu := flag.String("cpuprofile", "", "write a CPU profile of this process (the daemon side) here")
	verbose := flag.Bool("v", false, "log progress")
	flag.Parse()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	if *verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if *loop != "" {
		mnt, cleanup, err := loopFS(*dir, *loop)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fsbench:", err)
			os.Exit(1)
		}
		defer cleanup()
		*dir = mnt
	}
	if *cpu != "" {
		f, err := os.Create(*cpu)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fsbench:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	cfg := fsbench.Config{Dir: *dir, Samples: *samples, Logger: log, Mount: fs.Options{NoPassthrough: *noPT}}
	if *cells != "" {
		cfg.Only = strings.Split(*cells, ",")
	}
	rep, err := fsbench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fsbench:", err)
		os.Exit(1)
	}
	fmt.Printf("command: %s\n", strings.Join(os.Args, " "))
	rep.Table(os.Stdout)
}

// loopFS makes a file system ("ext4:8G", "xfs:8G") in an image under dir
// and mounts it.
func loopFS(dir, spec string) (string, func(), error) {
	fstype, size, ok := strings.Cut(spec, ":")
	if !ok {
		return "", nil, fmt.Errorf("-loop %q: want FSTYPE:SIZE", spec)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	img := filepath.Join(dir, fstype+".img")
	mnt := filepath.Join(dir, fstype)
	run := func(name string, args ...string) error {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %v: %v: %s", name, args, err, out)
		}
		return nil
	}
	exec.Command("umount", mnt).Run()
	os.Remove(img)
	if err := run("truncate", "-s", size, img); err != nil {
		return "", nil, err
	}
	var mkfs error
	switch fstype {
	case "ext4":
		mkfs = run("mkfs.ext4", "-q", "-F", "-j", img)
	case "xfs":
		mkfs = run("mkfs.xfs", "-q", "-f", "-m", "reflink=1", img)
	default:
		mkfs = fmt.Errorf("-loop: unsupported file system %q", fstype)
	}
	if mkfs != nil {
		return "", nil, mkfs
	}
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return "", nil, err
	}
	if err := run("mount", "-o", "loop", img, mnt); err != nil {
		return "", nil, err
	}
	return mnt, func() { exec.Command("umount", mnt).Run(); os.Remove(img) }, nil
}
