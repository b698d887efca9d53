// Command layerfs-sandbox-init is the sandbox init and nothing else. A
// launcher re-executing it instead of layerfsd skips the Go package
// initialization of everything the daemon links (SQLite, go-fuse, the
// Docker client), which costs several times the rest of an exec's fixed
// overhead. Install it next to layerfsd; sandbox.InitBinary finds it there.
package main
