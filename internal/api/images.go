package api

import (
	"net/http"
	"regexp"
	"slices"
	"strings"

	"layerfs.dev/layerfs/wire"
)

// imageRefRE is an image reference as the Store names images: a
// lower-case path (the first component may be host:port), an optional
// :tag, and, where a digest may pin it, @sha256:HEX.
var imageRefRE = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[0-9a-f]{64})?$`)

// checkImage checks an image reference; pinned says whether @DIGEST may
// follow the name.
func checkImage(field, s string, pinned bool) error {
	if s == "" {
		return invalid("%s is required", field)
	}
	if len(s) > 255+72 || !imageRefRE.MatchString(s) || (!pinned && strings.Contains(s, "@")) {
		want := "NAME"
		if pinned {
			want = "NAME or NAME@sha256:DIGEST"
		}
		return invalid("%s %q is not a valid image: want %s, NAME a lower-case reference such as team/env:3.12", field, s, want)
	}
	return nil
}

var imageKinds = []string{wire.ImageFromLayout, wire.ImageFromArchive, wire.ImageFromDocker, wire.ImageFromRegistry, wire.ImageFromDir}

func (s *Server) listImages(w http.ResponseWriter, r *http.Request) error {
	imgs, err := s.images.Images(ctxOf(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, imgs)
	return nil
}

func (s *Server) getImage(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := checkImage("image", name, true); err != nil {
		return err
	}
	img, err := s.images.Image(ctxOf(r), name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, img)
	return nil
}

func (s *Server) removeImage(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := checkImage("image", name, false); err != nil {
		return err
	}
	if err := s.images.RemoveImage(ctxOf(r), name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) importImage(w http.ResponseWriter, r *http.Request) error {
	var req wire.ImageImport
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if err := checkImage("name", req.Name, false); err != nil {
		return err
	}
	if !slices.Contains(imageKinds, req.Kind) {
		return invalid("kind %q: want one of %q", req.Kind, imageKinds)
	}
	if req.Source == "" {
		return invalid("source is required")
	}
	switch req.Kind {
	case wire.ImageFromLayout, wire.ImageFromArchive, wire.ImageFromDir:
		if err := hostPath("source", req.Source, true); err != nil {
			return err
		}
	}
	res, err := s.images.ImportImage(ctxOf(r), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, res)
	return nil
}

func (s *Server) pushImage(w http.ResponseWriter, r *http.Request) error {
	var req wire.ImagePush
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if err := checkImage("name", req.Name, true); err != nil {
		return err
	}
	if req.Ref == "" {
		return invalid("ref is required")
	}
	res, err := s.images.PushImage(ctxOf(r), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (s *Server) commitImage(w http.ResponseWriter, r *http.Request) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	var req wire.ImageCommit
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if err := checkImage("name", req.Name, false); err != nil {
		return err
	}
	res, err := s.images.CommitImage(ctxOf(r), id, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, res)
	return nil
}

func (s *Server) setProjectImage(w http.ResponseWriter, r *http.Request) error {
	p, err := projectParam(r)
	if err != nil {
		return err
	}
	var req wire.ProjectImage
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.Image != "" {
		if err := checkImage("image", req.Image, true); err != nil {
			return err
		}
	}
	proj, err := s.images.SetProjectImage(ctxOf(r), p, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, proj)
	return nil
}

func (s *Server) buildImage(w http.ResponseWriter, r *http.Request) error {
	var req wire.ImageBuild
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if err := checkImage("name", req.Name, false); err != nil {
		return err
	}
	if req.File == "" {
		return invalid("file is required: the build file's text")
	}
	if err := hostPath("context", req.Context, false); err != nil {
		return err
	}
	if req.Platform != "" && !platformRE.MatchString(req.Platform) {
		return invalid("platform %q is not a valid platform name", req.Platform)
	}
	res, err := s.images.BuildImage(ctxOf(r), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, res)
	return nil
}
