// Package lima runs LayerFS's daemon in a Lima virtual machine, for hosts
// that cannot serve FUSE mounts and namespaces themselves (a Mac). It is a
// platforms.Platform with Features{RemoteDaemon: true}: layerfsd runs as
// root inside the guest, serves the workspaces' FUSE mounts there and
// launches its namespace sandboxes there, and the host drives it through
// the ordinary API over a unix socket that Lima forwards (platforms.Remote).
//
// # One instance per project
//
// The instance is named "layerfs-<project>" (InstanceName). Its definition
// is generated from code with Lima's own limayaml types (Template) and
// checked with Lima's own loader and validation before limactl sees it
// (ValidateTemplate): Debian 12 or a local image, no host mounts,
// containerd off, the networks asked for, CPUs/memory/disk as configured,
// and two port-forwarding rules: the daemon's guest socket to a host socket
// in the instance directory, and "ignore" for every guest TCP/UDP port so a
// sandbox granted the network cannot publish ports on the host.
//
// # Lifecycle
//
//	Up:   limactl --version            (present, >= MinVersion)
//	      limactl list --json          (does the instance exist, is it running)
//	      limactl create --tty=false --name=N FILE   (when missing)
//	      limactl start --tty=false --timeout=D N    (when not running)
//	      ssh -F DIR/ssh.config -O forward -L SOCK:GUESTSOCK lima-N
//	                                   (emulated, plain mode: see below)
//	      limactl copy layerfsd N:/tmp/layerfsd.upload
//	      limactl shell --workdir / N sudo sh -c START
//	      GET /v1/version on the forwarded socket, bounded by DaemonTimeout
//	Down: limactl delete --force N     (or, with Keep, stop the daemon and
//	      limactl stop N)
//
// START installs the binary, makes /dev/fuse if udev has not, starts
// `layerfsd serve --store /var/lib/layerfs/store --socket
// /run/layerfs/layerfsd.sock` detached (setsid, log in
// /var/log/layerfsd.log) and hands the socket to the guest user, because
// Lima forwards guest sockets over its SSH connection as that user. Up does
// nothing more when the daemon already answers.
//
// Every limactl call goes through a Runner, so tests check the exact argv
// against fixtures and replay limactl's recorded outputs (testdata/). The
// command lines, the JSON of `limactl list --json` (one store.FormatData
// object a line), the version line and the error texts relied on were read
// from Lima v1.2.1's sources (cmd/limactl, pkg/store, pkg/instance).
//
// # What fails, and how
//
// limactl missing, too old, or run as root (limactl refuses root): an error
// wrapping platforms.ErrUnavailable that says how to fix it. Create or boot
// failing: platforms.ErrStart with limactl's stderr tail. The daemon not
// answering in time: platforms.ErrDaemon with the tail of the guest daemon's
// log.
//
// # On Linux, under software emulation
//
// scripts/ensure-lima builds everything the platform needs from the package
// registries (QEMU from apt, limactl and its guest agent from source, a
// guest image from Debian packages with mmdebstrap); Install describes that
// installation and Configure points Options at it: the image booted
// directly with its own kernel and initrd, QEMU under TCG
// (SoftwareEmulation, for hosts whose KVM does not work), and limactl run as
// the user layerfs-lima when this process is root. Lima picks KVM for a
// native guest on Linux with no setting to change it; the QEMU command it
// is given ($QEMU_SYSTEM_X86_64) carries its own -machine and -accel tcg,
// which Lima's qemu driver does not override. An emulated instance runs in
// Lima's plain mode: no Lima boot scripts and no guest agent, which took
// minutes of each boot under emulation, and no port forwarding by Lima, so
// Up forwards the daemon's socket itself through the instance's SSH master
// (ssh -O forward -L, before the daemon starts; see forwardSocket).
//
// Lima reads $LIMA_HOME (default ~/.lima) both in limactl and in the Go
// packages used here, so both see the same instances.
package lima
