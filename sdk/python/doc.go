// Package python holds the LayerFS Python SDK (sdk/python/layerfs, standard
// library only) and, in Go, only the test that runs its pytest suite against
// a real layerfsd, so that `make test` (go test ./...) runs it too.
package python
