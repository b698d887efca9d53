package lima

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lima-vm/lima/pkg/store"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/internal/guest"
)

// Install is a Lima installation made by scripts/ensure-lima: limactl and
// its guest agent built from source, a guest image built from Debian
// packages (a root disk, the cloud kernel and its initrd), and, for a root
// process, the system user limactl runs as (limactl refuses root).
type Install struct {
	Dir     string // the installation directory
	Limactl string // bin/limactl
	Disk    string // image/disk.qcow2: ext4 on the whole disk
	Kernel  string // image/vmlinuz
	Initrd  string // image/initrd.img
	// User runs limactl when this process is root; nil runs it as this
	// process's user.
	User *user.User
}

// InstallUser is the system user scripts/ensure-lima makes to run limactl
// for a root process.
const InstallUser = "layerfs-lima"

// kernelCmdline boots the image's root disk (ext4 on all of /dev/vda).
const kernelCmdline = "root=/dev/vda rw console=ttyS0 net.ifnames=0"

// DefaultInstallDir is where scripts/ensure-lima installs by default:
// /var/cache/layerfs/lima for root (readable by InstallUser), else
// layerfs/lima in the user's cache directory. $LAYERFS_LIMA_DIR overrides
// both.
func DefaultInstallDir() string {
	if d := os.Getenv("LAYERFS_LIMA_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/cache/layerfs/lima"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "layerfs", "lima")
	}
	return ""
}

// FindInstall checks the installation in dir ("" is DefaultInstallDir) and
// describes it. What is missing is an error wrapping
// platforms.ErrUnavailable that says to run scripts/ensure-lima.
func FindInstall(dir string) (Install, error) {
	if dir == "" {
		dir = DefaultInstallDir()
	}
	in := Install{
		Dir:     dir,
		Limactl: filepath.Join(dir, "bin", "limactl"),
		Disk:    filepath.Join(dir, "image", "disk.qcow2"),
		Kernel:  filepath.Join(dir, "image", "vmlinuz"),
		Initrd:  filepath.Join(dir, "image", "initrd.img"),
	}
	for _, f := range []string{in.Limactl, in.Disk, in.Kernel, in.Initrd} {
		if _, err := os.Stat(f); err != nil {
			how := "run scripts/ensure-lima"
			if log := filepath.Join(dir, "ensure-lima.log"); fileExists(log) {
				how += "; the log of its last run: " + log
			}
			return Install{}, fmt.Errorf("lima: no Lima installation in %s (%s): %w: %w", dir, how, platforms.ErrUnavailable, err)
		}
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup(InstallUser)
		if err != nil {
			return Install{}, fmt.Errorf("lima: limactl refuses root and user %s is missing (run scripts/ensure-lima): %w: %w", InstallUser, platforms.ErrUnavailable, err)
		}
		in.User = u
	}
	return in, nil
}

// WaitInstall is FindInstall once no scripts/ensure-lima is building in
// dir ("" is DefaultInstallDir): the script holds dir/.lock while it works
// (scripts/test-setup may run it in the background while other tests run),
// and an installation it is still building is not one yet. It waits, a
// shared lock polled each second, until ctx is done.
func WaitInstall(ctx context.Context, dir string) (Install, error) {
	if dir == "" {
		dir = DefaultInstallDir()
	}
	f, err := os.Open(filepath.Join(dir, ".lock"))
	if errors.Is(err, fs.ErrNotExist) {
		return FindInstall(dir) // no ensure-lima ever ran here
	} else if err != nil {
		return Install{}, fmt.Errorf("lima: %w", err)
	}
	defer f.Close()
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
		if err == nil {
			defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
			return FindInstall(dir)
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return Install{}, fmt.Errorf("lima: lock %s: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			return Install{}, fmt.Errorf("lima: scripts/ensure-lima still holds %s (log: %s): %w", f.Name(), filepath.Join(dir, "ensure-lima.log"), ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// Configure fills cfg's image, emulation and runner from the installation:
// the local image booted directly, under software emulation (this is for
// Linux hosts whose KVM may not work), limactl run from Dir as User with
// its own Lima directory.
func (in Install) Configure(cfg *Options) error {
	cfg.Image, cfg.Kernel, cfg.Initrd, cfg.KernelCmdline = in.Disk, in.Kernel, in.Initrd, kernelCmdline
	cfg.Arch = "x86_64"
	if runtime.GOARCH != "amd64" {
		return fmt.Errorf("lima: the installation's image is for x86_64, this host is %s: %w", runtime.GOARCH, platforms.ErrUnavailable)
	}
	cfg.SoftwareEmulation = true
	home, err := os.UserHomeDir()
	if err != nil {
		return fmt.Errorf("lima: %w", err)
	}
	r := guest.ExecRunner{Path: in.Limactl}
	if in.User != nil {
		uid, err1 := strconv.ParseUint(in.User.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(in.User.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("lima: user %s has a non-numeric uid or gid: %w", in.User.Username, platforms.ErrConfig)
		}
		r.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		home = in.User.HomeDir
		// The template and the staged layerfsd must be readable by User.
		if cfg.WorkDir == "" {
			cfg.WorkDir = os.TempDir()
		}
	}
	if cfg.LimaHome == "" {
		cfg.LimaHome = filepath.Join(home, ".lima")
	}
	r.Env = append(cleanEnv(os.Environ()), "HOME="+home)
	if in.User != nil {
		r.Env = append(r.Env, "USER="+in.User.Username, "LOGNAME="+in.User.Username)
	}
	cfg.Runner = r
	return nil
}

// cleanEnv drops what names this process's user from env.
func cleanEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "USER", "LOGNAME", "LIMA_HOME", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// qemuTCG is the QEMU command line given to limactl under software
// emulation: Lima adds -machine and -accel only where none is given, so
// these replace its "q35,accel=kvm" (the same machine Lima itself uses for
// TCG when the guest is of another architecture).
const qemuTCG = "qemu-system-x86_64 -machine q35,vmport=off -accel tcg,thread=multi,tb-size=512"

// emulatingRunner returns r (an ExecRunner, or nil for the default) with
// the environment that keeps Lima's QEMU off KVM, and LIMA_HOME.
func emulatingRunner(r Runner, limaHome string) (Runner, error) {
	env := []string{"QEMU_SYSTEM_X86_64=" + qemuTCG}
	if limaHome != "" {
		env = append(env, "LIMA_HOME="+limaHome)
	}
	return withEnv(r, env...)
}

// withEnv returns r (an ExecRunner, or nil for the default) with env added
// to the tool's environment. Another Runner (a test's replayer) is
// returned as it is: it runs no real limactl.
func withEnv(r Runner, env ...string) (Runner, error) {
	var er guest.ExecRunner
	switch v := r.(type) {
	case nil:
	case guest.ExecRunner:
		er = v
	default:
		return r, nil
	}
	if er.Env == nil {
		er.Env = os.Environ()
	}
	er.Env = append(append([]string(nil), er.Env...), env...)
	return er, nil
}

// instanceDir is where Lima keeps the instance: under Options.LimaHome, or
// where Lima's own packages say.
func (p *Platform) instanceDir() (string, error) {
	if p.cfg.LimaHome != "" {
		return filepath.Join(p.cfg.LimaHome, p.inst), nil
	}
	dir, err := store.InstanceDir(p.inst)
	if err != nil {
		return "", fmt.Errorf("lima: %w: %w", platforms.ErrConfig, err)
	}
	return dir, nil
}

// sshRunner runs ssh as r runs limactl (the same user and environment):
// an ExecRunner finds ssh on PATH instead of running limactl; another
// Runner (a test's) is returned as it is.
func sshRunner(r Runner) Runner {
	if er, ok := r.(guest.ExecRunner); ok {
		er.Path = ""
		return er
	}
	return r
}

// runsAsOtherUser tells whether r runs limactl as another user.
func runsAsOtherUser(r Runner) bool {
	er, ok := r.(guest.ExecRunner)
	return ok && er.Credential != nil
}

func fileExists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}

// copyFile copies src to dst with mode perm.
func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, perm)
}
