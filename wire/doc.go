// Package wire holds the JSON types of LayerFS's HTTP API (/v1). The daemon
// (api), the engine and the Go SDK (client) share them; the package depends
// on nothing else so that the SDK stays light.
package wire
