// Package outputcap is the one cap on an exec's output: a writer that
// passes on the first Limit bytes of a stream and drains the rest, so a
// chatty command never blocks on a full pipe nor fills the daemon's
// memory, and that keeps its destination's first write error instead of
// returning it, so the stream is still drained. The platforms cap what
// they stream (platforms.ExecSpec.OutputLimit) and the API what it
// collects for an answer given whole.
package outputcap
