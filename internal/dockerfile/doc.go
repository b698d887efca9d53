// Package dockerfile reads the build files `layerfs image build` takes, in
// the Dockerfile format, with BuildKit's own parser
// (github.com/moby/buildkit/frontend/dockerfile/parser: line continuations,
// comments, parser directives, JSON and shell forms) and its word
// expansion (frontend/dockerfile/shell: $VAR, ${VAR:-default}, quoting).
//
// It keeps the instructions LayerFS builds, one stage from one base: FROM
// (an image of the Store, or scratch), RUN, COPY and ADD of local files
// (--chown, --chmod), ENV, ARG, WORKDIR, USER, LABEL, EXPOSE, CMD and
// ENTRYPOINT; and refuses, naming the instruction and its line, what it
// does not: a second FROM (multi-stage builds), COPY --from, ADD of a URL
// or a git repository, RUN --mount and --network, heredocs, HEALTHCHECK,
// VOLUME, ONBUILD, STOPSIGNAL, SHELL and MAINTAINER.
package dockerfile
