package dockerfile

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"layerfs.dev/layerfs/wire/errclass"
)

// ErrUnsupported is wrapped when a build file asks for what LayerFS does
// not build; ErrSyntax when it does not parse.
var (
	ErrUnsupported = errclass.New(errclass.Invalid, "unsupported build instruction")
	ErrSyntax      = errclass.New(errclass.Invalid, "build file syntax")
)

// Supported are the instructions a build file may hold.
var Supported = []string{"FROM", "RUN", "COPY", "ADD", "ENV", "ARG", "WORKDIR", "USER", "LABEL", "EXPOSE", "CMD", "ENTRYPOINT"}

// Refused are the instructions of the format LayerFS does not build.
var Refused = []string{"HEALTHCHECK", "VOLUME", "ONBUILD", "STOPSIGNAL", "SHELL", "MAINTAINER"}

// flagsAllowed are each instruction's accepted flags (by name).
var flagsAllowed = map[string][]string{"COPY": {"chown", "chmod"}, "ADD": {"chown", "chmod"}}

// Instruction is one instruction of a build file.
type Instruction struct {
	Cmd  string   // upper case: FROM, RUN, ...
	Args []string // as written, not expanded: see Expand
	// JSON is the exec form (["a", "b"]) of RUN, CMD and ENTRYPOINT.
	JSON bool
	// Flags are --name=value flags, by name.
	Flags    map[string]string
	Line     int
	Original string
}

// String is the instruction as written.
func (in Instruction) String() string { return in.Original }

// File is a parsed build file.
type File struct {
	// Args are the ARGs before FROM (they may be used in FROM only).
	Args         []Instruction
	Instructions []Instruction // FROM first
	escape       rune
}

// Parse reads a build file and checks that LayerFS can build it.
func Parse(r io.Reader) (*File, error) {
	res, err := parser.Parse(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSyntax, err)
	}
	f := &File{escape: res.EscapeToken}
	for _, n := range res.AST.Children {
		in, err := instruction(n)
		if err != nil {
			return nil, err
		}
		switch {
		case in.Cmd == "FROM" && len(f.Instructions) > 0:
			return nil, in.refuse("a second FROM: multi-stage builds are not supported (one stage from one base)")
		case in.Cmd == "ARG" && len(f.Instructions) == 0:
			f.Args = append(f.Args, in)
		case len(f.Instructions) == 0 && in.Cmd != "FROM":
			return nil, fmt.Errorf("%w: line %d: %s before FROM", ErrSyntax, in.Line, in.Cmd)
		default:
			f.Instructions = append(f.Instructions, in)
		}
	}
	if len(f.Instructions) == 0 {
		return nil, fmt.Errorf("%w: no FROM", ErrSyntax)
	}
	return f, nil
}

func (in Instruction) refuse(why string) error {
	return fmt.Errorf("%w: line %d: %s: %s", ErrUnsupported, in.Line, in.Cmd, why)
}

// instruction reads one node of the parser's tree and refuses what
// LayerFS does not build.
func instruction(n *parser.Node) (Instruction, error) {
	in := Instruction{Cmd: strings.ToUpper(n.Value), JSON: n.Attributes["json"], Line: n.StartLine,
		Original: n.Original, Flags: map[string]string{}}
	for a := n.Next; a != nil; a = a.Next {
		in.Args = append(in.Args, a.Value)
	}
	if in.Cmd == "ENV" || in.Cmd == "LABEL" {
		// The parser gives KEY, VALUE, separator triples: keep the pairs.
		var pairs []string
		for i := 0; i+1 < len(in.Args); i += 3 {
			pairs = append(pairs, in.Args[i], in.Args[i+1])
		}
		in.Args = pairs
	}
	if slices.Contains(Refused, in.Cmd) {
		return in, in.refuse("not supported (the instructions built are " + strings.Join(Supported, ", ") + ")")
	}
	if !slices.Contains(Supported, in.Cmd) {
		return in, fmt.Errorf("%w: line %d: unknown instruction %s", ErrSyntax, in.Line, in.Cmd)
	}
	if len(n.Heredocs) > 0 {
		return in, in.refuse("heredocs are not supported")
	}
	for _, fl := range n.Flags {
		name, value, _ := strings.Cut(strings.TrimPrefix(fl, "--"), "=")
		if !slices.Contains(flagsAllowed[in.Cmd], name) {
			return in, in.refuse(fmt.Sprintf("flag --%s is not supported", name))
		}
		in.Flags[name] = value
	}
	return in, in.check()
}

// check refuses arguments of a supported instruction LayerFS does not
// build.
func (in Instruction) check() error {
	need := func(n int) error {
		if len(in.Args) < n {
			return fmt.Errorf("%w: line %d: %s needs %d argument(s)", ErrSyntax, in.Line, in.Cmd, n)
		}
		return nil
	}
	switch in.Cmd {
	case "FROM":
		if err := need(1); err != nil {
			return err
		}
		if len(in.Args) != 1 && !(len(in.Args) == 3 && strings.EqualFold(in.Args[1], "AS")) {
			return fmt.Errorf("%w: line %d: FROM IMAGE [AS NAME]", ErrSyntax, in.Line)
		}
	case "COPY", "ADD":
		if err := need(2); err != nil {
			return err
		}
		for _, src := range in.Args[:len(in.Args)-1] {
			if strings.Contains(src, "://") || strings.HasPrefix(src, "git@") {
				return in.refuse(fmt.Sprintf("source %q: only local files of the build context are supported", src))
			}
		}
	case "RUN", "WORKDIR", "USER", "ARG", "CMD", "ENTRYPOINT", "EXPOSE":
		return need(1)
	case "ENV", "LABEL":
		if len(in.Args) == 0 || len(in.Args)%2 != 0 {
			return fmt.Errorf("%w: line %d: %s wants KEY=VALUE pairs", ErrSyntax, in.Line, in.Cmd)
		}
	}
	return nil
}

// Expand substitutes $VAR and ${VAR...} in word from env (KEY=VALUE), as
// a Dockerfile's instructions do, and removes its quotes.
func (f *File) Expand(word string, env []string) (string, error) {
	lex := shell.NewLex(f.escape)
	out, _, err := lex.ProcessWord(word, shell.EnvsFromSlice(env))
	if err != nil {
		return "", fmt.Errorf("%w: expand %q: %w", ErrSyntax, word, err)
	}
	return out, nil
}
