// Command small is a sandbox init and nothing else: the smallest binary
// the launcher can re-execute, to compare with heavy.
package main

import "layerfs.dev/layerfs/engine/sandbox"

func main() {
	if !sandbox.InitMain() {
		panic("small is only a sandbox init")
	}
}
