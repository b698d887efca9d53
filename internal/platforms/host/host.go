package host

import (
	"fmt"
	"log/slog"
	"strings"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/docker"
	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
)

// Names lists the host platforms, the default first.
var Names = []string{"local", "docker"}

// New makes the host platform called name, logging to log (nil: discard);
// it is not Up yet.
func New(name string, log *slog.Logger) (platforms.Platform, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("platform", name)
	switch name {
	case "local":
		// The small init binary installed beside this one, when there is
		// one, is re-executed much faster than this binary.
		return local.New(local.Options{Exe: sandbox.InitBinary(), Logger: log}), nil
	case "docker":
		return docker.New(docker.Options{Logger: log}), nil
	}
	return nil, fmt.Errorf("%q is not a host platform (host platforms: %s)", name, strings.Join(Names, ", "))
}
