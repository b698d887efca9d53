// Package platformtest is the conformance suite every platforms.Platform
// runs from its own tests:
//
//	func TestConformance(t *testing.T) {
//		platformtest.Run(t, func(t *testing.T) platforms.Platform { return docker.New(...) })
//	}
//
// newPlatform returns a fresh platform that is not up; the suite brings it
// up once, makes every check of a running platform on it, and brings it
// down at the end, so a VM platform boots once per suite. Workspaces are plain directories below one temporary
// directory (any mount left below it afterwards is a leak), so
// the suite needs no FUSE and no daemon.
//
// What it checks: the exec contract (every case of BadSpecs refused with
// platforms.ErrBadSpec, naming its field, before anything runs; a
// workspace with a relative path or ".." refused by Attach; BadRequests
// refused as invalid through a guest's API), the lifecycle (Up twice, Down twice, Identity and the
// endpoint or Attach only while up), exit codes and signals, separate stdout and stderr, stdin,
// timeouts that kill the whole process tree, the output cap, the network
// (off by default, the host's when granted and Features.Network),
// workspace files visible both ways, concurrent execs, the limits the
// platform claims in Features, and that nothing is left afterwards:
// what the platform's own Leaks hook reports (see Leaker) and, on this
// host, mounts below the workspaces, processes started by the execs, and
// child processes of the test.
//
// HostMounts platforms are driven through SandboxHost. RemoteDaemon
// platforms are driven through the API of their guest's layerfsd with the
// client package: a project and a workspace in the guest, then the same
// checks of exits, output, stdin, timeouts, files both ways, concurrency
// and the network. This package's own test runs that variant against a
// layerfsd on this host, so it is exercised where no VM can boot.
package platformtest
