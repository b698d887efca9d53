// Package apitest is the contract suite of the engine as the API uses it
// (package api's interfaces, one per service): every implementation runs
// it from its tests, in the manner of platformtest for platforms.
//
//	func TestContract(t *testing.T) {
//		apitest.Run(t, apitest.Target{Engine: enginetest.Shared(t)})
//	}
//
// The suite checks each service's rules as package api states them: the
// lifecycle of projects, layers and branches (names taken, compare-and-swap
// heads, a branch a workspace stands on), refs, logs and paged diffs,
// commits of host directories and checkouts, workspaces from creation to
// end (changes, up-to-date and head-moved commits, uncommitted changes
// refused), execs (output, exit codes, timeouts, cancellation), files
// (modes, symlinks not followed or escaped, paged listings, tars checked
// whole before anything is written), watches (ready, the prefix, ended),
// the Store's maintenance and the metrics; with Target.Misdirect, the
// misdirected answer of every call on a workspace another host serves.
// Each check runs in a project of its own, so that many run on one engine
// and an engine can run the suite more than once.
//
// The engine runs on the test's host: host directories are the test's
// temporary directories.
//
// Elsewhere is the one double of the engine the project keeps: the engine
// as one host of a fleet sees it, for the SDK's tests of misdirected
// answers. It runs the suite too.
package apitest
