// Package applecontainer runs LayerFS's daemon inside a container of
// Apple's `container` CLI, where every container is its own lightweight
// Linux VM (Virtualization.framework, Apple silicon, macOS 26). It is a
// platforms.Platform with Features{RemoteDaemon: true}: layerfsd runs as
// root in that VM with every capability and /dev/fuse, serves the
// workspaces' FUSE mounts there and launches its namespace sandboxes there;
// the host drives it through the ordinary API over the daemon's unix socket,
// which the CLI publishes on the host with --publish-socket
// (platforms.Remote).
//
// # Lifecycle
//
//	Up:   container --version                 (present, >= MinVersion)
//	      container system status             (else: system start --enable-kernel-install)
//	      container list --all --format json  (does the container exist, is it running)
//	      container run --detach --name N --cap-add ALL --label layerfs.project=P
//	          [--cpus C] [--memory M] [--network none]
//	          --publish-socket HOST.sock:/var/lib/layerfs/run/layerfsd.sock IMAGE sleep infinity
//	                                          (or container start N when stopped)
//	      container exec N sh -c PREP         (stop an old daemon, make /dev/fuse)
//	      container copy LAYERFSD N:/usr/local/bin/layerfsd
//	      container exec --detach N sh -c 'exec layerfsd serve --store ... --socket ...'
//	      GET /v1/version on the host socket, bounded by DaemonTimeout
//	Down: container delete --force N, and the host socket
//
// Why these flags: since container 1.0.0 the default capability set no
// longer has CAP_SYS_ADMIN, which FUSE mounts and namespaces need, and
// there is no --privileged, so the guest gets --cap-add ALL (it is alone in
// its VM). udev does not run in the container, so /dev/fuse is made with
// mknod when missing (the CLI's default kernel is built with
// CONFIG_FUSE_FS=y). --publish-socket makes the host socket appear when the
// guest binds its end, and relays each connection over vsock. The container
// id, the JSON of `container list --format json` (an array of
// {configuration, status}; status a string before 1.x, an object with a
// "state" since), the version line ("container CLI version 1.2.1 (build:
// release, commit: ...)") and the error texts ("Error: ...") were read from
// apple/container's sources and issues.
//
// Every CLI call goes through a Runner, so tests check the exact argv
// against fixtures and replay recorded outputs (testdata/).
package applecontainer
