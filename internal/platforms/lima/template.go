package lima

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"github.com/lima-vm/lima/pkg/limayaml"

	"layerfs.dev/layerfs/internal/platforms"
)

// Paths inside the guest. The socket lives on /run (tmpfs) so that a reboot
// never leaves a stale one; the Store lives on the guest's disk.
const (
	guestSocket = "/run/layerfs/layerfsd.sock"
	guestStore  = "/var/lib/layerfs/store"
	guestDaemon = "/usr/local/bin/layerfsd"
	guestLog    = "/var/log/layerfsd.log"
	guestPID    = "/run/layerfs/layerfsd.pid"
	// guestUpload is where limactl copy puts the binary: copy runs as the
	// guest user (scp), who cannot write /usr/local/bin.
	guestUpload = "/tmp/layerfsd.upload"
)

// defaultImages are Debian 12 generic cloud images, the distribution LayerFS
// is developed on; Lima's own templates/_images/debian-12.yaml lists the same
// "latest" locations. Used when Options.Image is empty.
var defaultImages = []limayaml.Image{
	{File: limayaml.File{Location: "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2", Arch: limayaml.X8664}},
	{File: limayaml.File{Location: "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-arm64.qcow2", Arch: limayaml.AARCH64}},
}

// provisionScript runs as root at every boot (Lima's "system" provisioning
// mode). Debian's cloud kernel has FUSE as a module.
const provisionScript = `#!/bin/sh
set -eu
modprobe fuse || true
mkdir -p /run/layerfs /var/lib/layerfs
`

// Template builds the instance definition for cfg with the limayaml types.
// hostSocket is where Lima forwards the guest daemon's socket on this host.
// The result is what `limactl create` gets; Validate checks it as limactl
// would.
func Template(cfg Options, hostSocket string) (*limayaml.LimaYAML, error) {
	y := &limayaml.LimaYAML{}
	if cfg.VMType != "" {
		y.VMType = ptr(cfg.VMType)
	}
	if cfg.Arch != "" {
		y.Arch = ptr(cfg.Arch)
	}
	if cfg.Image != "" {
		img := limayaml.Image{File: limayaml.File{Location: cfg.Image, Arch: cfg.Arch}}
		if cfg.Kernel != "" {
			img.Kernel = &limayaml.Kernel{File: limayaml.File{Location: cfg.Kernel, Arch: cfg.Arch}, Cmdline: cfg.KernelCmdline}
			if cfg.Initrd != "" {
				img.Initrd = &limayaml.File{Location: cfg.Initrd, Arch: cfg.Arch}
			}
			y.Firmware.LegacyBIOS = ptr(true)
		}
		y.Images = []limayaml.Image{img}
	} else {
		y.Images = append([]limayaml.Image(nil), defaultImages...)
	}
	if cfg.SoftwareEmulation {
		y.VMType = ptr(limayaml.QEMU)
		y.CPUType = limayaml.CPUType{limayaml.X8664: "max", limayaml.AARCH64: "max"}
		// Plain mode: no Lima boot scripts and no guest agent to wait
		// for, which under emulation took minutes of each boot. It also
		// turns Lima's port forwarding off (the rules below stay as the
		// record of what is forwarded): the platform forwards the
		// daemon's socket itself (Platform.forwardSocket), and no guest
		// port reaches the host.
		y.Plain = ptr(true)
	}
	if cfg.CPUs > 0 {
		y.CPUs = ptr(cfg.CPUs)
	}
	if cfg.Memory != "" {
		y.Memory = ptr(cfg.Memory)
	}
	if cfg.Disk != "" {
		y.Disk = ptr(cfg.Disk)
	}
	// No host directory is shared: workspaces live in the guest's Store and
	// reach the host only through the daemon's API.
	y.Mounts = nil
	// containerd (nerdctl) is not used: sandboxes are layerfsd's own
	// namespace sandboxes.
	y.Containerd = limayaml.Containerd{System: ptr(false), User: ptr(false)}
	y.Provision = []limayaml.Provision{{Mode: limayaml.ProvisionModeSystem, Script: provisionScript}}
	y.PortForwards = []limayaml.PortForward{
		// The daemon's API socket, forwarded over Lima's SSH connection.
		{GuestSocket: guestSocket, HostSocket: hostSocket},
		// Nothing else: a sandbox that was granted the network must not see
		// its listening ports published on the host's loopback.
		{GuestIP: net.IPv4zero, GuestPortRange: [2]int{1, 65535}, Proto: limayaml.ProtoAny, Ignore: true},
	}
	for _, n := range cfg.Networks {
		nw, err := parseNetwork(n)
		if err != nil {
			return nil, err
		}
		y.Networks = append(y.Networks, nw)
	}
	return y, nil
}

// parseNetwork turns an Options.Networks entry into Lima's network type:
// "lima:NAME" (a network of Lima's networks.yaml, e.g. lima:shared),
// "socket:PATH" (a socket_vmnet or QEMU socket) or "vzNAT".
func parseNetwork(s string) (limayaml.Network, error) {
	switch {
	case s == "vzNAT":
		return limayaml.Network{VZNAT: ptr(true)}, nil
	case strings.HasPrefix(s, "lima:") && len(s) > len("lima:"):
		return limayaml.Network{Lima: strings.TrimPrefix(s, "lima:")}, nil
	case strings.HasPrefix(s, "socket:") && filepath.IsAbs(strings.TrimPrefix(s, "socket:")):
		return limayaml.Network{Socket: strings.TrimPrefix(s, "socket:")}, nil
	}
	return limayaml.Network{}, fmt.Errorf("network %q: want lima:NAME, socket:/ABS/PATH or vzNAT: %w", s, platforms.ErrConfig)
}

// MarshalTemplate renders y as the YAML file handed to `limactl create`.
func MarshalTemplate(y *limayaml.LimaYAML) ([]byte, error) {
	b, err := limayaml.Marshal(y, false)
	if err != nil {
		return nil, fmt.Errorf("marshal lima template: %w", err)
	}
	return b, nil
}

// ValidateTemplate checks the rendered template the way `limactl create`
// does before it accepts one: load it as the lima.yaml of instDir (which
// fills Lima's defaults, including $LIMA_HOME/_config/default.yaml and
// override.yaml) and run Lima's own validation, which reports every problem
// at once.
func ValidateTemplate(b []byte, instDir string) error {
	y, err := limayaml.Load(b, filepath.Join(instDir, "lima.yaml"))
	if err != nil {
		return fmt.Errorf("load lima template: %w", err)
	}
	if err := limayaml.Validate(y, false); err != nil {
		return fmt.Errorf("lima template is invalid: %w", errors.Join(err, platforms.ErrConfig))
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
