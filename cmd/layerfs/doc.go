// Command layerfs is the LayerFS command line: history verbs (project,
// branch, layer, log, diff, checkout, commit, gc, fsck, stats), workspaces
// (ws) and the benches. Every verb that touches a Store is a client of the
// Store's daemon (started when none answers), so one door leads into a
// Store; only init, daemon and the bench harness open one in this process.
// Each verb group lives in its own file and is added to the root command
// here.
package main
