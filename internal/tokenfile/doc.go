// Package tokenfile reads a bearer token from a file, for the listeners
// that refuse to run on TCP without one (`layerfs mcp --http`).
package tokenfile
