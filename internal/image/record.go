package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire/errclass"
)

// ErrBadLayer is wrapped by the refusal of a layer that cannot be
// imported safely or whole.
var ErrBadLayer = errclass.New(errclass.Invalid, "bad image layer")

// ErrBadImage is wrapped when an image's manifest or config cannot be used.
var ErrBadImage = errclass.New(errclass.Invalid, "bad image")

// Record is what the Store keeps of an image beside its commit
// (store.Image.Record).
type Record struct {
	// Config is the OCI image config as it came; its digest is the image's.
	Config json.RawMessage `json:"config"`
	// Layers are the image's layers, the lowest first.
	Layers []Layer `json:"layers"`
	// Source says where the image came from ("oci-layout:/dir",
	// "registry:host/repo:tag", "commit:ws-...", ...).
	Source string `json:"source,omitempty"`
	// ManifestDigest is the digest of the manifest it was read from, where
	// there was one (a registry's, a layout's).
	ManifestDigest string `json:"manifest_digest,omitempty"`
}

// Layer is one layer of an image.
type Layer struct {
	// DiffID is the sha256 digest of the layer's uncompressed tar.
	DiffID string `json:"diff_id"`
	// Digest is the digest of the blob it came as (compressed), "" for a
	// layer made here.
	Digest string `json:"digest,omitempty"`
	// Size is the uncompressed tar's length in bytes; 0 when the layer was
	// stored already and not read again.
	Size int64 `json:"size,omitempty"`
	// Commit is the image's tree after this layer.
	Commit store.ID `json:"commit"`
}

// Digest is the digest of an image's config: "sha256:" and its hex.
func Digest(config []byte) string {
	sum := sha256.Sum256(config)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// DecodeRecord reads a stored image's record.
func DecodeRecord(img store.Image) (*Record, error) {
	var r Record
	if err := json.Unmarshal(img.Record, &r); err != nil {
		return nil, fmt.Errorf("%w: image %s: record: %w", errclass.Corrupt, img.Name, err)
	}
	return &r, nil
}

// ConfigFile parses the record's config.
func (r *Record) ConfigFile() (*v1.ConfigFile, error) {
	var cf v1.ConfigFile
	if err := json.Unmarshal(r.Config, &cf); err != nil {
		return nil, fmt.Errorf("%w: config: %w", ErrBadImage, err)
	}
	return &cf, nil
}

// Defaults are what an image gives its workspace's execs when they name
// none: its config's Env, WorkingDir and User.
type Defaults struct {
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
}

// Defaults reads them from the record's config.
func (r *Record) Defaults() (Defaults, error) {
	cf, err := r.ConfigFile()
	if err != nil {
		return Defaults{}, err
	}
	c := cf.Config
	return Defaults{Env: slices.Clone(c.Env), WorkingDir: c.WorkingDir, User: c.User,
		Entrypoint: slices.Clone(c.Entrypoint), Cmd: slices.Clone(c.Cmd)}, nil
}

// short is a digest's first 12 hex digits, for messages.
func short(digest string) string {
	_, hexPart, ok := strings.Cut(digest, ":")
	if !ok {
		hexPart = digest
	}
	if len(hexPart) > 12 {
		hexPart = hexPart[:12]
	}
	return hexPart
}

// Ref is an image named with an optional pinned digest: NAME[@DIGEST].
type Ref struct {
	Name   string
	Digest string // "" unless pinned
}

// ParseRef reads NAME[@DIGEST].
func ParseRef(s string) (Ref, error) {
	name, digest, pinned := strings.Cut(s, "@")
	if err := store.ValidImageName(name); err != nil {
		return Ref{}, err
	}
	if pinned {
		algo, h, ok := strings.Cut(digest, ":")
		if !ok || algo != "sha256" || len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" {
			return Ref{}, fmt.Errorf("%w: image %q: digest %q: want sha256: and 64 hex digits", errclass.Invalid, s, digest)
		}
	}
	return Ref{Name: name, Digest: digest}, nil
}

func (r Ref) String() string {
	if r.Digest == "" {
		return r.Name
	}
	return r.Name + "@" + r.Digest
}

// defaultPath is the PATH an image made here starts with, as container
// engines give one.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// NewConfig returns an OCI config for this host's platform: base's
// (nil: a new one with the usual PATH) with diffIDs appended to its
// layers and a history entry saying what made them.
func NewConfig(base *v1.ConfigFile, diffIDs []string, createdBy string) ([]byte, error) {
	cf := v1.ConfigFile{OS: platform.OS, Architecture: platform.Architecture, RootFS: v1.RootFS{Type: "layers"}}
	cf.Config.Env = []string{defaultPath}
	if base != nil {
		cf = *base.DeepCopy()
	}
	for _, d := range diffIDs {
		h, err := v1.NewHash(d)
		if err != nil {
			return nil, fmt.Errorf("%w: diff id %q: %w", ErrBadImage, d, err)
		}
		cf.RootFS.DiffIDs = append(cf.RootFS.DiffIDs, h)
	}
	if createdBy != "" {
		cf.History = append(cf.History, v1.History{CreatedBy: createdBy, EmptyLayer: len(diffIDs) == 0})
	}
	return json.Marshal(cf)
}
