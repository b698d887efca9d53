package catalog

import (
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/applecontainer"
	"layerfs.dev/layerfs/internal/platforms/host"
	"layerfs.dev/layerfs/internal/platforms/libkrun"
	"layerfs.dev/layerfs/internal/platforms/lima"
)

// Names lists the platforms, host platforms first.
var Names = append(slices.Clone(host.Names), "lima", "applecontainer", "libkrun")

// Options are the settings the platforms share.
type Options struct {
	Logger *slog.Logger
	// Project names the VM (one per project) of the VM platforms.
	Project string
	// GuestDaemon is the layerfsd binary the VM platforms copy into their
	// guest (built for the guest's architecture).
	GuestDaemon string
}

// New makes the platform called name; it is not Up yet.
func New(name string, o Options) (platforms.Platform, error) {
	if o.Project == "" {
		o.Project = "default"
	}
	if slices.Contains(host.Names, name) {
		return host.New(name, host.Options{Logger: o.Logger})
	}
	switch name {
	case "lima":
		cfg := lima.Options{Project: o.Project, Daemon: o.GuestDaemon, Logger: o.Logger}
		// On Linux, the installation scripts/ensure-lima makes (limactl
		// built from source, a local image, software emulation) when it
		// is there; otherwise the limactl on PATH with Lima's defaults.
		if runtime.GOOS == "linux" {
			if in, err := lima.FindInstall(""); err == nil {
				if err := in.Configure(&cfg); err != nil {
					return nil, err
				}
			}
		}
		return lima.New(cfg)
	case "applecontainer":
		return applecontainer.New(applecontainer.Options{Project: o.Project, Daemon: o.GuestDaemon, Logger: o.Logger})
	case "libkrun":
		return libkrun.New(libkrun.Options{Project: o.Project, Daemon: o.GuestDaemon, Logger: o.Logger})
	}
	return nil, fmt.Errorf("unknown platform %q (known: %s)", name, strings.Join(Names, ", "))
}
