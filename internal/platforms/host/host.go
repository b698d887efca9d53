package host

import (
	"fmt"
	"log/slog"
	"strings"

	"layerfs.dev/layerfs/internal/egress"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/docker"
	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
)

// Names lists the host platforms, the default first.
var Names = []string{"local", "docker"}

// Options are the settings of the host platforms.
type Options struct {
	// Logger receives the platforms' events; nil discards them.
	Logger *slog.Logger
	// NoUserNamespace runs local sandboxes in the host's user namespace
	// (uid 0 without capabilities). A local overlay workspace then has
	// plain layers, so host processes create files in its mount under
	// their own ids; with a user namespace only ids of the sandboxes'
	// range can (docs/security.md, "User namespaces").
	NoUserNamespace bool
	// EgressTag names the egress tables of this daemon's platforms (each
	// adds a letter of its own; see egress.Config.Tag): a daemon started
	// again on the same Store with the same tag removes what the one
	// before it left. Empty: random.
	EgressTag string
	// EgressUpstream is the resolver the egress asks for allowed names;
	// empty: the host's (/etc/resolv.conf).
	EgressUpstream string
}

// egress is the egress configuration of platform letter c.
func (o Options) egress(c string) egress.Config {
	cfg := egress.Config{Upstream: o.EgressUpstream}
	if o.EgressTag != "" {
		cfg.Tag = c + o.EgressTag
	}
	return cfg
}

// New makes the host platform called name; it is not Up yet.
func New(name string, o Options) (platforms.Platform, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("platform", name)
	switch name {
	case "local":
		// The small init binary installed beside this one, when there is
		// one, is re-executed much faster than this binary.
		return local.New(local.Options{Exe: sandbox.InitBinary(), NoUserNamespace: o.NoUserNamespace, Egress: o.egress("l"), Logger: log}), nil
	case "docker":
		return docker.New(docker.Options{NoUserNamespace: o.NoUserNamespace, Egress: o.egress("d"), Logger: log}), nil
	}
	return nil, fmt.Errorf("%q is not a host platform (host platforms: %s)", name, strings.Join(Names, ", "))
}
