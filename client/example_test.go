package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
)

// newProject makes a project for one example.
func newProject(ctx context.Context, c *client.Client, name string) {
	if _, err := c.CreateProject(ctx, wire.CreateProject{Name: name}); err != nil {
		log.Fatal(err)
	}
}

func ExampleDial() {
	ctx := context.Background()
	// daemonAddr is "unix:///path/to/layerfsd.sock"; TCP is
	// client.Dial(ctx, "http://host:7070", client.WithToken(token)).
	c, err := client.Dial(ctx, daemonAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Println("api", c.Version().API)
	// Output: api v1
}

func ExampleClient_CreateWorkspace() {
	ctx := context.Background()
	c, err := client.Dial(ctx, daemonAddr)
	if err != nil {
		log.Fatal(err)
	}
	newProject(ctx, c, "ex-create")
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "ex-create", Branch: "main"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ws.Info().Branch, ws.Info().State)
	if err := ws.End(ctx, client.EndOptions{}); err != nil {
		log.Fatal(err)
	}
	// Output: main mounted
}

func ExampleWorkspace_Exec() {
	ctx := context.Background()
	c, _ := client.Dial(ctx, daemonAddr)
	newProject(ctx, c, "ex-exec")
	ws, _ := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "ex-exec", Branch: "main"})
	defer ws.End(ctx, client.EndOptions{Discard: true})

	res, err := ws.Exec(ctx, "echo hello", client.ExecOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("exit %d: %s", res.ExitCode, res.Stdout)

	// Streamed: output reaches the writers as the command writes it.
	res, err = ws.Exec(ctx, "echo line 0; echo line 1", client.ExecOptions{Stdout: os.Stdout})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit", res.ExitCode)
	// Output:
	// exit 0: hello
	// line 0
	// line 1
	// exit 0
}

func ExampleWorkspace_ExecArgv() {
	ctx := context.Background()
	c, _ := client.Dial(ctx, daemonAddr)
	newProject(ctx, c, "ex-argv")
	ws, _ := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "ex-argv", Branch: "main"})
	defer ws.End(ctx, client.EndOptions{Discard: true})

	res, err := ws.ExecArgv(ctx, []string{"sh", "-c", "exit 3"}, client.ExecOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit", res.ExitCode)
	// Output: exit 3
}

func ExampleWorkspace_Attach() {
	ctx := context.Background()
	c, _ := client.Dial(ctx, daemonAddr)
	newProject(ctx, c, "ex-attach")
	ws, _ := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "ex-attach", Branch: "main"})
	defer ws.End(ctx, client.EndOptions{Discard: true})

	// Input as it comes: the command reads what is written to it.
	a, err := ws.Attach(ctx, []string{"sh", "-c", "read name; echo hello $name"},
		client.AttachOptions{ExecOptions: client.ExecOptions{Stdout: os.Stdout}})
	if err != nil {
		log.Fatal(err)
	}
	a.Write([]byte("sandbox\n"))
	a.CloseStdin()
	res, err := a.Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit", res.ExitCode)
	// Output:
	// hello sandbox
	// exit 0
}

func ExampleWorkspace_Terminal() {
	ctx := context.Background()
	c, _ := client.Dial(ctx, daemonAddr)
	newProject(ctx, c, "ex-terminal")
	ws, _ := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "ex-terminal", Branch: "main"})
	defer ws.End(ctx, client.EndOptions{Discard: true})

	// A command on a terminal of 30 rows and 100 columns; its output,
	// carriage returns and all, goes to the writer.
	var screen strings.Builder
	term, err := ws.Terminal(ctx, []string{"sh", "-c", "stty size; exit 5"}, wire.TerminalSize{Rows: 30, Cols: 100}, &screen)
	if err != nil {
		log.Fatal(err)
	}
	res, err := term.Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q, exit %d\n", screen.String(), res.ExitCode)
	// Output: "30 100\r\n", exit 5
}

func ExampleWorkspace_Upload() {
	ctx := context.Background()
	c, _ := client.Dial(ctx, daemonAddr)
	newProject(ctx, c, "ex-upload")
	ws, _ := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "ex-upload", Branch: "main"})
	defer ws.End(ctx, client.EndOptions{Discard: true})

	src, _ := os.MkdirTemp("", "ex-upload-")
	defer os.RemoveAll(src)
	os.MkdirAll(filepath.Join(src, "pkg"), 0o755)
	os.WriteFile(filepath.Join(src, "pkg", "main.go"), []byte("package main\n"), 0o644)

	if err := ws.Upload(ctx, src, "app"); err != nil {
		log.Fatal(err)
	}
	b, err := ws.ReadFile(ctx, "app/pkg/main.go")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(b))
	// Output: package main
}

func ExampleWorkspace_Download() {
	ctx := context.Background()
	c, _ := client.Dial(ctx, daemonAddr)
	newProject(ctx, c, "ex-download")
	ws, _ := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "ex-download", Branch: "main"})
	defer ws.End(ctx, client.EndOptions{Discard: true})
	ws.Exec(ctx, "mkdir -p out && echo all good > out/report.txt", client.ExecOptions{})

	dst, _ := os.MkdirTemp("", "ex-download-")
	defer os.RemoveAll(dst)
	if err := ws.Download(ctx, "out", filepath.Join(dst, "results")); err != nil {
		log.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dst, "results", "report.txt"))
	fmt.Print(string(b))
	// Output: all good
}

func ExampleWorkspace_Commit() {
	ctx := context.Background()
	c, _ := client.Dial(ctx, daemonAddr)
	newProject(ctx, c, "ex-commit")
	ws, _ := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "ex-commit", Branch: "main"})
	ws.WriteFile(ctx, "notes.txt", []byte("remember\n"), 0o644)

	res, err := ws.Commit(ctx, "add notes")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Result)
	head, _ := c.Commit(ctx, "ex-commit", "main")
	fmt.Println(head.ID == res.Commit, head.Message)
	ws.End(ctx, client.EndOptions{})
	// Output:
	// created
	// true add notes
}

func ExampleWorkspace_End() {
	ctx := context.Background()
	c, _ := client.Dial(ctx, daemonAddr)
	newProject(ctx, c, "ex-end")
	ws, _ := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "ex-end", Branch: "main"})
	ws.WriteFile(ctx, "scratch", []byte("x"), 0o644)

	// A plain end refuses to drop uncommitted changes.
	err := ws.End(ctx, client.EndOptions{})
	fmt.Println(client.IsUncommitted(err))
	fmt.Println(ws.End(ctx, client.EndOptions{Discard: true}))
	// Output:
	// true
	// <nil>
}

func ExampleClient_ForkBranch() {
	ctx := context.Background()
	c, _ := client.Dial(ctx, daemonAddr)
	newProject(ctx, c, "ex-fork")
	b, err := c.ForkBranch(ctx, "ex-fork", "experiment", "layer:1")
	if err != nil {
		log.Fatal(err)
	}
	bs, _ := c.Branches(ctx, "ex-fork")
	fmt.Println(b.Name, len(bs))
	// Output: experiment 2
}

func ExampleIsNotFound() {
	ctx := context.Background()
	c, _ := client.Dial(ctx, daemonAddr)
	_, err := c.Project(ctx, "no-such-project")
	fmt.Println(client.IsNotFound(err))
	fmt.Println(strings.Contains(err.Error(), "not_found"))
	// Output:
	// true
	// true
}
