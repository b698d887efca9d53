// Command layerfs-supervise runs LayerFS's docker execs inside their
// containers; see package layerfs.dev/layerfs/internal/platforms/docker/supervise.
// Build it static (CGO_ENABLED=0) and install it beside layerfs and
// layerfsd, where the docker platform looks for it.
package main
