package docker_test

import (
	"context"
	"fmt"
	"os"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/docker"
)

// A workspace directory becomes /workspace of a container; each Exec is one
// docker exec in it.
func Example() {
	ctx := context.Background()
	p := docker.New(docker.Options{}) // the engine at /var/run/docker.sock
	if err := p.Up(ctx); err != nil {
		fmt.Println(err) // names the socket and how to start Docker
		return
	}
	defer p.Down(ctx)
	id, _ := p.Identity(ctx)
	fmt.Println(id.Runtime, id.Image)

	sb, err := p.Attach(ctx, platforms.Workspace{ID: "demo", HostPath: "/srv/workspaces/demo"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Close(ctx)
	res, err := sb.Exec(ctx, platforms.ExecSpec{Argv: platforms.ShellArgv("git status --short | wc -l")}, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.ExitCode, res.Command, res.Launch)
}
