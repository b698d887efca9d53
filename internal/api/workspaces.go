package api

import (
	"net/http"

	"layerfs.dev/layerfs/internal/netpolicy"
	"layerfs.dev/layerfs/wire"
)

func idParam(r *http.Request) (string, error) {
	id := r.PathValue("id")
	return id, checkID(id)
}

func (s *Server) createWorkspace(w http.ResponseWriter, r *http.Request) error {
	var spec wire.WorkspaceSpec
	if err := decode(w, r, &spec); err != nil {
		return err
	}
	if err := checkSpec(&spec); err != nil {
		return err
	}
	if p, ok := peer(r.Context()); ok && spec.Owner == nil && !spec.Native {
		spec.Owner = &p // the caller owns its workspace's mount path
	}
	ws, err := s.workspaces.CreateWorkspace(ctxOf(r), spec)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/workspaces/"+ws.ID)
	writeJSON(w, http.StatusCreated, ws)
	return nil
}

// listWorkspaces answers this host's workspaces, or with all=true every
// host's of a shared Store, each with its host.
func (s *Server) listWorkspaces(w http.ResponseWriter, r *http.Request) error {
	q, err := query(r.URL.Query(), "all")
	if err != nil {
		return err
	}
	all, err := boolParam(q, "all")
	if err != nil {
		return err
	}
	list := s.workspaces.Workspaces
	if all {
		list = s.workspaces.FleetWorkspaces
	}
	wss, err := list(ctxOf(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nonNil(wss))
	return nil
}

func (s *Server) getWorkspace(w http.ResponseWriter, r *http.Request) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	st, err := s.workspaces.WorkspaceStatus(ctxOf(r), id)
	if err != nil {
		return err
	}
	if st.Changes == nil {
		st.Changes = []wire.Change{}
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *Server) endWorkspace(w http.ResponseWriter, r *http.Request) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	q, err := query(r.URL.Query(), "discard")
	if err != nil {
		return err
	}
	discard, err := boolParam(q, "discard")
	if err != nil {
		return err
	}
	if err := s.workspaces.EndWorkspace(ctxOf(r), id, discard); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) commitWorkspace(w http.ResponseWriter, r *http.Request) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	var req wire.CommitRequest
	if err := decodeOptional(w, r, &req); err != nil {
		return err
	}
	if err := checkCommitText(req.Message, req.Author); err != nil {
		return err
	}
	res, err := s.workspaces.CommitWorkspace(ctxOf(r), id, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (s *Server) mountWorkspace(w http.ResponseWriter, r *http.Request) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	ws, err := s.workspaces.MountWorkspace(ctxOf(r), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ws)
	return nil
}

func (s *Server) updateWorkspace(w http.ResponseWriter, r *http.Request) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	var req wire.UpdateRequest
	if err := decodeOptional(w, r, &req); err != nil {
		return err
	}
	if req.Ref != "" {
		if err := checkRef("ref", req.Ref); err != nil {
			return err
		}
	}
	if err := checkPrefer(req.Prefer); err != nil {
		return err
	}
	res, err := s.workspaces.UpdateWorkspace(ctxOf(r), id, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (s *Server) resolveConflicts(w http.ResponseWriter, r *http.Request) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	var req wire.ResolveRequest
	if err := decodeOptional(w, r, &req); err != nil {
		return err
	}
	for i, p := range req.Paths {
		c, err := workspacePath("paths", p, false)
		if err != nil {
			return err
		}
		req.Paths[i] = c
	}
	left, err := s.workspaces.ResolveConflicts(ctxOf(r), id, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.ResolveResult{Conflicts: nonNil(left)})
	return nil
}

func (s *Server) forkWorkspace(w http.ResponseWriter, r *http.Request) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	var req wire.ForkRequest
	if err := decodeOptional(w, r, &req); err != nil {
		return err
	}
	if req.Count < 0 || req.Count > wire.MaxForkCount {
		return invalid("count %d: want 1 to %d", req.Count, wire.MaxForkCount)
	}
	res, err := s.workspaces.ForkWorkspace(ctxOf(r), id, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, res)
	return nil
}

func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	var req wire.NetworkChange
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.Mode == "" {
		return invalid("mode: required (%q, %q or %q)", wire.NetworkNone, wire.NetworkEgress, wire.NetworkHost)
	}
	if err := netpolicy.Check(req.Mode, req.Egress); err != nil {
		return err
	}
	ws, err := s.workspaces.SetNetwork(ctxOf(r), id, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ws)
	return nil
}
