// Package checkpoint keeps checkpoints of sandboxes in the Store: a
// directory of CRIU's images (package criu) becomes a checkpoint record
// (store.Checkpoint) and, on any host of the Store, a directory again.
//
// Save captures the images as any content is captured (package commit:
// chunked by content, so two checkpoints of one program share the chunks
// of the memory that did not change, and only new chunks are written),
// stores them as the tree of a commit whose first parent is the commit of
// the workspace's files at the same instant, and records the checkpoint
// naming that commit: the record alone keeps the image and the files from
// GC, and fsck checks what it names. Load checks the images out into a
// directory for a restore: on a shared Store, on whichever host restores.
package checkpoint
