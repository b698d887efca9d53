// Package image keeps container images in the Store: each layer of an
// image is a commit whose tree is the image's file system after that
// layer and whose first parent is the layer below, so two images on one
// base share its commits, trees and chunks, and a new image on a stored
// one costs what its own layers add. An image's name points at its last
// layer's commit and at its record (the OCI config as it came, which
// carries Env, WorkingDir, User, Entrypoint and Cmd, and each layer's
// digests); the image's digest is its config's, as Docker's image ID is.
//
// # Import
//
// Import reads an image (go-containerregistry's v1.Image: an OCI layout
// directory, a docker save or OCI archive, a Docker engine's image, a
// registry's) layer by layer. Each layer's tar stream is applied to its
// base's tree as commit.Build changes: regular files stored as they are
// read (commit.ContentWriter: cut as a capture cuts them, placed in the
// Store's cache), whiteouts (.wh.NAME) and opaque directories
// (.wh..wh..opq) applied, owners, modes (setuid and setgid bits
// included, as data), mtimes, extended attributes (PAX SCHILY.xattr) and
// hard links kept. What a layer gave on a base is remembered (a Store
// derivation keyed by the base commit and the layer's diff ID), so a
// layer is read once whatever the images that share it, and a registry's
// shared base is not even downloaded twice.
//
// A bad layer is refused whole, with an error (ErrBadLayer) naming the
// layer and the path: an archive that ends early or does not match its
// diff ID, a name or a hard link that leads out of the root, an entry
// written below a symlink, a device node. Everything of an import goes
// into one Store batch, and the image is named last, in the transaction
// that records its derivations: a failed import leaves no name and no
// derivation, only unreferenced objects that GC collects.
//
// # Export
//
// A layer made here (a workspace root's changes, a build step) is
// described as an OCI layer too: LayerTar writes the difference of two
// trees as a deterministic tar (sorted, whiteouts for what went), so its
// diff ID is a function of the trees, and Push sends an image to a
// registry layer by layer from the Store.
package image
