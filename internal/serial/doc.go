// Package serial runs background jobs one at a time: a Queue holds the
// jobs asked for and runs them in order on one goroutine, started when a
// job comes and ended when none is left, so that work that is O(tree)
// (an image build, a prefetch) never runs twice at once and a burst of
// requests costs one worker. A job already queued is not queued again;
// a Queue that keeps only the latest job (Latest) runs, of a burst, the
// last. Stop cancels the job running and drops the others.
package serial
