// Command heavy is a sandbox init that links what layerfsd links (SQLite,
// go-fuse, the Docker client, HTTP and slog), so that re-executing it costs
// what re-executing the real daemon costs: every linked package's init
// runs before main.
package main
