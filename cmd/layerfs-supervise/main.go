package main

import (
	"os"

	"layerfs.dev/layerfs/internal/platforms/docker/supervise"
)

func main() { os.Exit(supervise.Main(os.Args[1:])) }
