package wire

import "time"

// Image is a container image kept in the Store: every layer a commit, the
// name pointing at the last one's.
type Image struct {
	Name string `json:"name"`
	// Digest is the digest of the image's OCI config (what Docker calls
	// the image ID); it names what the image holds.
	Digest string `json:"digest"`
	// Commit is the last layer's commit: the image's tree.
	Commit  string    `json:"commit"`
	Created time.Time `json:"created"`
	// Source says where it came from: "oci-layout:DIR", "archive:FILE",
	// "docker:REF", "registry:REF", "dir:DIR", "commit:WORKSPACE",
	// "build:FILE".
	Source string `json:"source,omitempty"`
	// ManifestDigest is the digest of the manifest it was read from, where
	// there was one (a registry's, a layout's, an archive's).
	ManifestDigest string       `json:"manifest_digest,omitempty"`
	Layers         []ImageLayer `json:"layers"`
	Config         ImageConfig  `json:"config"`
	// Files and Bytes are the image tree's totals.
	Files int64 `json:"files"`
	Bytes int64 `json:"bytes"`
}

// ImageLayer is one layer of an image, the lowest first.
type ImageLayer struct {
	// DiffID is the sha256 digest of the layer's uncompressed tar.
	DiffID string `json:"diff_id"`
	// Digest is the digest of the blob it came as, "" for a layer made
	// by LayerFS.
	Digest string `json:"digest,omitempty"`
	// Size is the uncompressed tar's bytes (0: the layer was stored
	// already when this image came, and not read again).
	Size   int64  `json:"size,omitempty"`
	Commit string `json:"commit"`
}

// ImageConfig is what of an image's config a workspace's execs use.
type ImageConfig struct {
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
}

// Sources of an image import (ImageImport.Kind).
const (
	ImageFromLayout   = "oci-layout" // an OCI image layout directory on the daemon's host
	ImageFromArchive  = "archive"    // a docker save tar or an OCI layout tar on the daemon's host
	ImageFromDocker   = "docker"     // an image of the Docker engine the daemon reaches
	ImageFromRegistry = "registry"   // a registry's image, by reference
	ImageFromDir      = "dir"        // a directory on the daemon's host, as one layer
)

// ImageImport is POST /v1/images: store the image at Source, of Kind, as
// Name.
type ImageImport struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	Source string `json:"source"`
	// Insecure lets a registry be reached over plain HTTP (one on
	// localhost always may).
	Insecure bool `json:"insecure,omitempty"`
}

// ImagePush is POST /v1/images/push: send the image Name (NAME or
// NAME@DIGEST) to a registry as Ref.
type ImagePush struct {
	Name     string `json:"name"`
	Ref      string `json:"ref"`
	Insecure bool   `json:"insecure,omitempty"`
}

// ImageCommit is POST /v1/workspaces/{id}/image: the workspace root's
// changes as a new layer on its image, named Name.
type ImageCommit struct {
	Name string `json:"name"`
}

// ImageBuild is POST /v1/images/build: build File (a Dockerfile's text)
// with the directory Context on the daemon's host as its context, named
// Name.
type ImageBuild struct {
	Name    string `json:"name"`
	File    string `json:"file"`
	Context string `json:"context,omitempty"`
	// Args are the build arguments (ARG), NAME=VALUE.
	Args []string `json:"args,omitempty"`
	// Platform runs the RUN steps (default: the daemon's default).
	Platform string `json:"platform,omitempty"`
	// Network gives the RUN steps the host's network (NetworkHost).
	Network string `json:"network,omitempty"`
	// NoCache reruns every step.
	NoCache bool `json:"no_cache,omitempty"`
}

// ImageResult answers an import, a pull, a commit, a build or a push.
type ImageResult struct {
	Image Image      `json:"image"`
	Stats ImageStats `json:"stats"`
	// Steps are a build's steps, each cached or run.
	Steps []BuildStep `json:"steps,omitempty"`
	// Pushed is the reference a push wrote, with its manifest digest.
	Pushed string `json:"pushed,omitempty"`
}

// ImageStats tell what an image operation cost.
type ImageStats struct {
	Layers     int   `json:"layers"`
	LayersRead int   `json:"layers_read"` // layers read and stored (the others were stored already)
	Bytes      int64 `json:"bytes"`       // uncompressed layer bytes read
	NewChunks  int64 `json:"new_chunks"`
	NewBytes   int64 `json:"new_bytes"`
	// StoreGrowth is the payload and object bytes the Store took on.
	StoreGrowth int64 `json:"store_growth"`
	WallNs      int64 `json:"wall_ns"`
}

// BuildStep is one instruction of a build.
type BuildStep struct {
	Instruction string `json:"instruction"`
	Cached      bool   `json:"cached,omitempty"`
	WallNs      int64  `json:"wall_ns"`
	// ExitCode and Output are a RUN's (its output's last 4 KiB).
	ExitCode int    `json:"exit_code,omitempty"`
	Output   string `json:"output,omitempty"`
}

// ProjectImage is PUT /v1/projects/{p}/image: the image a workspace of the
// project gets when it names none ("" for none).
type ProjectImage struct {
	Image string `json:"image"`
}
