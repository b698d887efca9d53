package dockerfile

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	f, err := Parse(strings.NewReader(`# syntax is BuildKit's
ARG BASE=team/base:1
FROM ${BASE}
ARG VERSION=1.0
ENV APP=/srv/app \
    MODE=prod
WORKDIR $APP
COPY --chown=1000:1000 src/ ./
RUN ["python3", "-c", "print(1)"]
RUN echo "$VERSION" > /version
USER app
CMD ["python3", "main.py"]
`))
	require.NoError(t, err)
	require.Len(t, f.Args, 1)
	require.Equal(t, "FROM", f.Instructions[0].Cmd)
	var cmds []string
	for _, in := range f.Instructions {
		cmds = append(cmds, in.Cmd)
	}
	require.Equal(t, []string{"FROM", "ARG", "ENV", "WORKDIR", "COPY", "RUN", "RUN", "USER", "CMD"}, cmds)
	require.Equal(t, []string{"APP", "/srv/app", "MODE", "prod"}, f.Instructions[2].Args)
	require.Equal(t, "1000:1000", f.Instructions[4].Flags["chown"])
	require.True(t, f.Instructions[5].JSON)
	require.Equal(t, []string{"python3", "-c", "print(1)"}, f.Instructions[5].Args)
	got, err := f.Expand("${BASE}", []string{"BASE=team/base:1"})
	require.NoError(t, err)
	require.Equal(t, "team/base:1", got)
}

func TestRefused(t *testing.T) {
	for src, want := range map[string]string{
		"FROM a\nFROM b\n":                      "multi-stage",
		"FROM a\nCOPY --from=b /x /y\n":         "flag --from",
		"FROM a\nADD https://x.org/f /f\n":      "only local files",
		"FROM a\nHEALTHCHECK CMD true\n":        "HEALTHCHECK: not supported",
		"FROM a\nVOLUME /data\n":                "VOLUME: not supported",
		"FROM a\nRUN --mount=type=cache true\n": "flag --mount",
		"FROM a\nRUN <<EOF\ntrue\nEOF\n":        "heredocs",
		"FROM a\nSHELL [\"/bin/bash\"]\n":       "SHELL: not supported",
	} {
		_, err := Parse(strings.NewReader(src))
		require.ErrorIs(t, err, ErrUnsupported, src)
		require.ErrorContains(t, err, want, src)
		require.ErrorContains(t, err, "line 2", src)
	}
	_, err := Parse(strings.NewReader("RUN true\n"))
	require.ErrorIs(t, err, ErrSyntax)
	_, err = Parse(strings.NewReader("FROM a\nFROBNICATE x\n"))
	require.ErrorIs(t, err, ErrSyntax)
}
