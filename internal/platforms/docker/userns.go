package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/docker/supervise"
	"layerfs.dev/layerfs/internal/platforms/internal/userns"
	"layerfs.dev/layerfs/internal/seccomp"
	"layerfs.dev/layerfs/internal/seccomp/bpfload"
)

// idmapRoot holds the id-mapped clones of workspaces that are not mounted
// over id-mapped layers, one directory per owner (see Platform.owner), for
// the containers to bind.
const idmapRoot = "/run/layerfs/docker-idmap"

// userNSState is what Up set up for sandboxes in user namespaces.
type userNSState struct {
	ids    userns.Range
	ns     *os.File // a namespace with ids' mapping, for id-mapping workspaces; nil: none
	why    string   // why ns is nil
	filter string   // bpfload.Encode of the filter an exec loads in its namespace
	// seccomp is the containers' profile with clone into a new user
	// namespace allowed (for the supervisor's fork).
	seccomp string
}

// setUpUserNS makes the user namespace workspaces are id-mapped with, when
// the engine lets LayerFS run commands in one: containers' processes are
// the host's ids (no userns-remap) and their host paths are this host's
// (a local engine). Unless Options.NoUserNamespace turned it off, an
// engine that does not is an error: sandboxes run in their user namespace
// or not at all.
func (p *Platform) setUpUserNS(st *upState) error {
	u := &st.userNS
	const remedy = "; or run docker sandboxes in the host's user namespace, uid 0 without capabilities, with layerfsd serve --no-user-namespace"
	switch {
	case p.opts.NoUserNamespace:
		u.why = "turned off (layerfsd serve --no-user-namespace)"
		return nil
	case st.info.remapped():
		return fmt.Errorf("docker: %w: %w: the engine's userns-remap maps container ids itself, so workspaces cannot be id-mapped for LayerFS's namespace (turn userns-remap off%s)",
			platforms.ErrUnavailable, errNoUserNS, remedy)
	case !strings.HasPrefix(p.opts.Host, "unix://"):
		return fmt.Errorf("docker: %w: %w: the engine %s is not on this host, which makes the namespace (use a local engine%s)",
			platforms.ErrUnavailable, errNoUserNS, p.opts.Host, remedy)
	}
	u.ids = userns.DefaultRange(p.log)
	if p.opts.UserNamespace != nil {
		u.ids = *p.opts.UserNamespace
	}
	progs, err := seccomp.BPF()
	if err == nil {
		u.filter = bpfload.Encode(progs)
		u.seccomp, err = seccomp.DockerProfile(true)
	}
	if err == nil {
		u.ns, err = userns.Hold(st.supervisor, []string{supervise.Name, "hold"}, u.ids)
	}
	if err != nil {
		return fmt.Errorf("docker: %w: %w: %w (%s%s)", platforms.ErrUnavailable, errNoUserNS, err, userns.Remedy(err), remedy)
	}
	return nil
}

// errNoUserNS: the platform cannot give its sandboxes the user namespace
// it was configured with; nothing runs without it.
var errNoUserNS = errors.New("no user namespace for docker sandboxes")

// IDMap is the namespace whose mapping a workspace's overlay layers take,
// so that the container's commands see its files with their ids on disk
// (platforms.IDMapper).
func (p *Platform) IDMap() (*os.File, uint32, uint32, error) {
	_, st, err := p.current()
	switch {
	case err != nil:
		return nil, 0, 0, err
	case st.userNS.ns == nil:
		return nil, 0, 0, fmt.Errorf("docker: no user namespace: %s", st.userNS.why)
	}
	return st.userNS.ns, st.userNS.ids.Host, st.userNS.ids.Size, nil
}

// sandboxNS decides how w's container runs its commands: in a user
// namespace (ids non-nil), with the host path the container binds (w's
// own when its layers are id-mapped already, else an id-mapped clone of
// it at staging, which the caller unmounts with dropClone), or, when the
// platform was told to run them without one, in the host's. A workspace
// that cannot be id-mapped is an error.
func (p *Platform) sandboxNS(st upState, w platforms.Workspace, name string) (bind, staging string, ids *userns.Range, err error) {
	u := st.userNS
	if u.ns == nil {
		return w.HostPath, "", nil, nil
	}
	if w.IDMapped {
		return w.HostPath, "", &u.ids, nil
	}
	staging = filepath.Join(idmapRoot, p.owner, name)
	if err := idmappedClone(w.HostPath, staging, int(u.ns.Fd())); err != nil {
		return "", "", nil, fmt.Errorf("%w: the workspace cannot be id-mapped: %w (serve it over id-mapped layers or from a file system that can be id-mapped; "+
			"or run docker sandboxes in the host's user namespace with layerfsd serve --no-user-namespace)", errNoUserNS, err)
	}
	return staging, staging, &u.ids, nil
}

// idmappedClone mounts a clone of the tree at src, id-mapped with userns,
// at dst (made here).
func idmappedClone(src, dst string, ns int) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("clone %s: %w", src, err)
	}
	defer unix.Close(fd)
	if err := userns.IDMap(fd, ns); err != nil {
		return fmt.Errorf("id-map %s: %w", src, err)
	}
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		os.Remove(dst)
		return fmt.Errorf("mount the id-mapped clone at %s: %w", dst, err)
	}
	return nil
}

// dropClone unmounts and removes an id-mapped clone, and its owner's
// directory once empty.
func dropClone(dir string) error {
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	_ = os.Remove(filepath.Dir(dir)) // fails while other clones are there
	return nil
}

// dropOrphanClones removes the clones of owners (pid-random) whose process
// is gone: what a crashed run left mounted.
func dropOrphanClones() error {
	owners, err := os.ReadDir(idmapRoot)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range owners {
		if !ownerGone(o.Name()) {
			continue
		}
		clones, _ := os.ReadDir(filepath.Join(idmapRoot, o.Name()))
		for _, c := range clones {
			errs = append(errs, dropClone(filepath.Join(idmapRoot, o.Name(), c.Name())))
		}
		_ = os.Remove(filepath.Join(idmapRoot, o.Name()))
	}
	return errors.Join(errs...)
}
